import Foundation

/// A cap on the bytes all transfers together may move per second (BITS's and WorkManager's
/// "background traffic must not crowd out the user's"). Each caller reserves a slot of time for
/// its bytes and waits for it, so the transfers share the rate in the order they ask.
///
/// Pacing is network behaviour in real time, like a read timeout: it uses `ContinuousClock`,
/// not the daemon's wall clock (a virtual clock must not stall the bytes).
actor BandwidthCap {
    let bytesPerSecond: Double
    private var nextFree = ContinuousClock.now
    /// Bytes may run this far ahead of the rate, so short bursts are not chopped up.
    private let burst: Duration = .milliseconds(100)

    init(bytesPerSecond: Int64) { self.bytesPerSecond = Double(max(1, bytesPerSecond)) }

    /// Waits until `bytes` more fit under the cap.
    func take(_ bytes: Int) async throws {
        let clock = ContinuousClock()
        let now = clock.now
        let start = max(now, nextFree)
        nextFree = start.advanced(by: .seconds(Double(bytes) / bytesPerSecond))
        let wait = nextFree - burst
        if wait > now { try await clock.sleep(until: wait) }
    }
}
