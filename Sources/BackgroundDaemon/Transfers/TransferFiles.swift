import BackgroundModel
import BackgroundTransfers
import Foundation

/// The files bgd keeps for transfers that have not ended, in a transfer directory (the state's
/// own `transfers/` and each container's): `<id>.upload`, its copy of what an upload sends, and
/// `<id>.partial`, what a download has received so far. An app's finished downloads sit beside
/// them as `<id>-<name>`; those are the app's, never touched here.
enum TransferFiles {
    /// The transfer a file of bgd's belongs to, and whether it is an upload's copy; nil for any
    /// other name.
    static func owner(ofFileNamed name: String) -> (id: TransferID, isUpload: Bool)? {
        for (suffix, isUpload) in [(".upload", true), (".partial", false)] where name.hasSuffix(suffix) {
            let digits = name.dropLast(suffix.count)
            // Digits only: Int64 alone would also take a sign ("+5.partial").
            guard digits.allSatisfy({ ("0"..."9").contains($0) }), let id = Int64(digits) else { return nil }
            return (TransferID(id), isUpload)
        }
        return nil
    }

    /// Bytes of the upload copies in `directory`: what an app's waiting uploads hold of the disk.
    static func uploadBytes(in directory: String) -> Int64 {
        var total: Int64 = 0
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        where owner(ofFileNamed: name)?.isUpload == true {
            var info = stat()
            // lstat: a link an app planted is not followed, and counts as the link.
            if lstat(directory + "/" + name, &info) == 0 { total += Int64(info.st_size) }
        }
        return total
    }

    /// Removes from `directories` every upload copy a crash left half made, and every upload
    /// copy and partial download of a transfer up to `highest` that is not in `outstanding` (it ended, and a crash came between its ending and
    /// the file's removal, or an older bgd kept it); returns how many. One of a transfer above
    /// `highest` was made since they were read, and stays.
    static func removeLeftovers(in directories: [String], outstanding: Set<TransferID>, highest: TransferID) -> Int {
        var removed = 0
        for directory in directories where type(of: directory) == S_IFDIR {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] {
                if name.hasPrefix(copyingPrefix) {
                    if SafeFiles.remove(directory + "/" + name) { removed += 1 }
                    continue
                }
                guard let owner = owner(ofFileNamed: name), owner.id <= highest, !outstanding.contains(owner.id)
                else { continue }
                // Not through a link the app swapped in for the directory since it was checked.
                if SafeFiles.remove(directory + "/" + name) { removed += 1 }
            }
        }
        return removed
    }

    /// An upload's copy while bgd makes it, before its transfer exists. Only a crash leaves one
    /// behind (it is renamed to `<id>.upload` in the transaction that makes the transfer, or
    /// removed), so the start-up sweep removes every one it finds.
    static func copyingName() -> String { copyingPrefix + UUID().uuidString }
    static let copyingPrefix = ".copying-"

    /// What is at `path` itself (`S_IFDIR`, `S_IFLNK`, …), a link not followed; nil if nothing.
    /// A container is the app's to write: a `transfers` it made a link must not point bgd's
    /// writes or removals at a directory of its choosing.
    static func type(of path: String) -> mode_t? {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & S_IFMT : nil
    }
}
