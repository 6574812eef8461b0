import BackgroundModel
import Foundation
import Synchronization

/// A `ManualClock` whose `sleep(for:)` and `sleep(untilElapsed:)`, once the clock has reached
/// their end, park until the test opens the gate: the moment between a timer's sleep returning
/// and its next step, held open (a race between a timer and what it times, settled one way or
/// the other on purpose). The gate ignores cancellation, as a sleep that has returned does.
/// `sleep(until:)` is the manual clock's own.
public final class GatedClock: WallClock {
    public let manual = ManualClock()
    private let gate = Mutex<(parked: CheckedContinuation<Void, Never>?, open: Bool)>((nil, false))

    public init() {}

    public var now: Date { manual.now }
    public var elapsed: Duration { manual.elapsed }
    public var awake: Duration { manual.awake }
    public func sleep(until deadline: Date) async throws { try await manual.sleep(until: deadline) }

    public func sleep(untilElapsed end: Duration) async throws {
        try await manual.sleep(untilElapsed: end)
        await withCheckedContinuation { continuation in
            let open = gate.withLock { gate in
                if !gate.open { gate.parked = continuation }
                return gate.open
            }
            if open { continuation.resume() }
        }
    }

    /// Whether a sleeper has reached its end and waits at the gate.
    public var isParked: Bool { gate.withLock { $0.parked != nil } }

    /// Lets the parked sleeper (and every later one) go on.
    public func openGate() {
        gate.withLock { gate in
            gate.open = true
            defer { gate.parked = nil }
            return gate.parked
        }?.resume()
    }
}
