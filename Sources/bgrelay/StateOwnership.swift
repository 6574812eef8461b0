import Foundation

/// Root working on a relay's state directory that another user owns — the system unit's, whose
/// user systemd makes (`DynamicUser=`) — leaves the database files it touched to that user.
/// SQLite makes `-wal` and `-shm` beside the database as whoever opens it first; left to root,
/// they stop the relay from opening its own database at its next start.
enum StateOwnership {
    static let databaseFiles = ["relay.sqlite", "relay.sqlite-wal", "relay.sqlite-shm"]

    /// Gives `directory`'s database files to the directory's owner, when this process is root
    /// and the directory is someone else's. Links are left alone (never followed).
    static func giveDatabaseToDirectoryOwner(_ directory: String) {
        var owner = stat()
        guard geteuid() == 0, stat(directory, &owner) == 0, owner.st_uid != 0 else { return }
        for name in databaseFiles {
            let path = directory + "/" + name
            var file = stat()
            guard lstat(path, &file) == 0, file.st_mode & S_IFMT == S_IFREG,
                file.st_uid != owner.st_uid || file.st_gid != owner.st_gid
            else { continue }
            if lchown(path, owner.st_uid, owner.st_gid) != 0 {
                FileHandle.standardError.write(
                    Data("bgrelay: cannot give \(path) to its directory's owner (uid \(owner.st_uid)): \(String(cString: strerror(errno))); chown it yourself before the relay starts\n".utf8))
            }
        }
    }
}
