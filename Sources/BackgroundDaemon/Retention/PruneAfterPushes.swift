import Synchronization

/// Rings the pruner once every `threshold` pushes bgd stores, from the gateway or the relay. The
/// pruner's timer comes every 6 hours, and a provider sending as fast as the gateway takes
/// (20 a second per token) stores 432,000 pushes in that time — replaced ones keep no payload,
/// but each is a row until a pass keeps only an app's newest 1,000 settled. Rung every 10,000,
/// a flood is pruned every few minutes; a machine's ordinary few pushes a day never ring it.
final class PruneAfterPushes: Sendable {
    private let threshold: Int
    private let pruner: Doorbell
    private let sinceLastRing = Mutex(0)

    init(threshold: Int, pruner: Doorbell) {
        self.threshold = max(1, threshold)
        self.pruner = pruner
    }

    /// `count` more pushes were committed.
    func stored(_ count: Int) {
        let due = sinceLastRing.withLock { stored -> Bool in
            stored += count
            guard stored >= threshold else { return false }
            stored = 0
            return true
        }
        if due { pruner.ring() }
    }
}
