/// How fast a transfer moves, from its last few byte counts: what `bgctl download` shows beside
/// the bar. Samples are taken on a clock that only goes forward (`WallClock.elapsed`), so the
/// wall clock set back or forward mid-transfer gives no absurd rate; and a count that goes down
/// (bgd restarted the transfer from zero: the server would not resume it) starts the samples
/// again rather than show a negative rate.
public struct TransferRate: Sendable {
    /// How many samples the rate spans: enough to smooth a bursty read, few enough to follow a
    /// change of speed within seconds.
    public static let window = 5

    private var samples: [(at: Duration, bytes: Int64)] = []

    public init() {}

    public mutating func record(_ bytes: Int64, at time: Duration) {
        if let last = samples.last, bytes < last.bytes || time < last.at { samples.removeAll() }
        samples.append((time, bytes))
        if samples.count > Self.window { samples.removeFirst(samples.count - Self.window) }
    }

    /// Bytes a second over the samples; zero until two samples apart in time exist.
    public var bytesPerSecond: Double {
        guard let first = samples.first, let last = samples.last, last.at > first.at else { return 0 }
        return Double(last.bytes - first.bytes) / (last.at - first.at).seconds
    }
}
