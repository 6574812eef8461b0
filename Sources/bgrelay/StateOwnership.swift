import BackgroundRelay
import Foundation

/// Root working on a relay's state directory that another user owns — the system unit's, whose
/// user systemd makes (`DynamicUser=`) — must not leave a database the relay cannot open. Only
/// the database file is at stake: SQLite run as root gives the `-wal` and `-shm` files it makes
/// to the database file's owner. So when root is the first to open it, the file is made here,
/// fresh (never through a link), as the directory owner's.
enum StateOwnership {
    /// Makes `directory`'s database file as the directory owner's, when this process is root,
    /// the directory is someone else's and the file is not there yet.
    static func prepareDatabase(in directory: String) {
        var owner = stat()
        guard geteuid() == 0, stat(directory, &owner) == 0, owner.st_mode & S_IFMT == S_IFDIR, owner.st_uid != 0
        else { return }
        let path = directory + "/" + Relay.databaseName
        // O_EXCL: a file already there (or a link put there) is not touched; opening the store
        // then says what is wrong with it, if anything.
        let file = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard file >= 0 else { return }
        defer { close(file) }
        if fchown(file, owner.st_uid, owner.st_gid) != 0 {
            FileHandle.standardError.write(
                Data("bgrelay: cannot give \(path) to its directory's owner (uid \(owner.st_uid)): \(String(cString: strerror(errno))); chown it before the relay starts\n".utf8))
        }
    }
}
