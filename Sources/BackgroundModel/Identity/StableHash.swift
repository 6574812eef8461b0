/// A hash that is the same in every process and every run (Swift's `Hasher` is seeded per
/// process): for names derived from data (a state directory's cgroup) and for decisions that must
/// be reproducible (a retry's jitter). FNV-1a over the UTF-8 bytes; not for security.
public enum StableHash {
    public static func fnv1a(_ text: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in text.utf8 {
            hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        return hash
    }
}
