import BackgroundModel
import Foundation
import QuietThreads
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Sleeps until wall-clock deadlines with no nap at all: one thread waits on two timerfds and
/// wakes only when a deadline is due or the wall clock was set (issue 17: an idle bgd must not
/// wake every minute to look at the clock).
///
/// - The alarm is a *relative* timer on `CLOCK_BOOTTIME`, which keeps counting while the machine
///   is suspended: a sleeper is on time after a resume (NIO's timers run on `CLOCK_MONOTONIC`,
///   which stops during suspend, so they cannot be trusted for a deadline hours away).
/// - The watch is an absolute `CLOCK_REALTIME` timer far in the future with
///   `TFD_TIMER_CANCEL_ON_SET`: the kernel cancels it when anyone sets the wall clock (a user,
///   NTP stepping it), and every deadline is measured again.
///
/// Durations are measured from `Date()` at arming time, so a process whose wall clock is
/// shifted (libfaketime in the chaos campaign) still sleeps the right amount.
///
/// Linux only; `shared` is nil elsewhere, or where timerfd is missing, and bgd naps instead.
final class WallClockAlarm: @unchecked Sendable {
    // @unchecked: the descriptors are set once; `sleepers` lives in a Mutex.
    static let shared: WallClockAlarm? = WallClockAlarm()

    private struct Sleeper {
        let deadline: Date
        let continuation: CheckedContinuation<Void, any Error>
    }
    private struct State {
        var sleepers: [UInt64: Sleeper] = [:]
        var nextID: UInt64 = 0
        /// The deadline the alarm is armed for, so that only an earlier sleeper pokes the thread.
        var armedFor: Date?
    }
    private let state = Mutex(State())
    private let alarm: Int32
    private let watch: Int32
    private let poke: (read: Int32, write: Int32)

    private init?() {
        #if os(Linux)
            guard let create = TimerFD.create, TimerFD.setTime != nil else { return nil }
            let alarm = create(CLOCK_BOOTTIME, TimerFD.cloexec | TimerFD.nonblock)
            let watch = create(CLOCK_REALTIME, TimerFD.cloexec | TimerFD.nonblock)
            var ends: [Int32] = [0, 0]
            guard alarm >= 0, watch >= 0, pipe(&ends) == 0 else { return nil }
            for descriptor in ends + [alarm, watch] { _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC) }
            _ = fcntl(ends[0], F_SETFL, O_NONBLOCK)
            self.alarm = alarm
            self.watch = watch
            self.poke = (ends[0], ends[1])
            guard armWatch() else { return nil }
            NamedThread.start("bgd-wall-clock") { [unowned self] in self.run() }
        #else
            return nil
        #endif
    }

    /// Returns at or after `deadline` on the wall clock; throws `CancellationError` if the task
    /// is cancelled first.
    func sleep(until deadline: Date) async throws {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let (due, earlier) = state.withLock { state -> (Bool, Bool) in
                    if Task.isCancelled || deadline <= Date() { return (true, false) }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return (false, state.armedFor.map { deadline < $0 } ?? true)
                }
                if due { continuation.resume() } else if earlier { wakeThread() }
            }
        } onCancel: {
            let sleeper = state.withLock { $0.sleepers.removeValue(forKey: id) }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
        try Task.checkCancellation()
    }

    private func wakeThread() {
        var byte: UInt8 = 1
        _ = write(poke.write, &byte, 1)
    }

    #if os(Linux)
        private func run() {
            var entries = [alarm, watch, poke.read].map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            var scratch = [UInt8](repeating: 0, count: 64)
            while true {
                resumeDueAndArm()
                for index in entries.indices { entries[index].revents = 0 }
                guard poll(&entries, nfds_t(entries.count), -1) >= 0 || errno == EINTR else { return }
                // Consume what woke us: the alarm's expiry count, the pokes, and the watch (a read
                // after the clock was set fails with ECANCELED; the watch is armed again).
                if entries[0].revents != 0 { _ = read(alarm, &scratch, 8) }
                if entries[2].revents != 0 { while read(poke.read, &scratch, scratch.count) > 0 {} }
                if entries[1].revents != 0 {
                    _ = read(watch, &scratch, 8)
                    _ = armWatch()
                }
            }
        }

        /// Resumes every sleeper whose deadline has passed and arms the alarm for the next one.
        private func resumeDueAndArm() {
            let now = Date()
            let (due, next) = state.withLock { state -> ([Sleeper], Date?) in
                let due = state.sleepers.filter { $0.value.deadline <= now }
                for id in due.keys { state.sleepers[id] = nil }
                let next = state.sleepers.values.map(\.deadline).min()
                state.armedFor = next
                return (Array(due.values), next)
            }
            for sleeper in due { sleeper.continuation.resume() }
            // Zero disarms; a due deadline still gets a nanosecond, or the timer would be off.
            let wait = next.map { max($0.timeIntervalSince(now), 1e-9) } ?? 0
            var spec = itimerspec(it_interval: Glibc.timespec(), it_value: Self.span(wait))
            _ = TimerFD.setTime?(alarm, 0, &spec, nil)
        }

        /// Far in the future (ten years on), cancelled by the kernel when the wall clock is set.
        @discardableResult
        private func armWatch() -> Bool {
            let farAway = Date().timeIntervalSince1970 + 10 * 365 * 86_400
            var spec = itimerspec(it_interval: Glibc.timespec(), it_value: Self.span(farAway))
            return TimerFD.setTime?(watch, TimerFD.absolute | TimerFD.cancelOnSet, &spec, nil) == 0
        }

        private static func span(_ seconds: TimeInterval) -> Glibc.timespec {
            let whole = seconds.rounded(.down)
            return Glibc.timespec(tv_sec: Int(whole), tv_nsec: Int((seconds - whole) * 1e9))
        }
    #endif
}

#if os(Linux)
    /// timerfd(2), looked up at run time: Glibc's Swift module does not carry <sys/timerfd.h>.
    private enum TimerFD {
        typealias Create = @convention(c) (Int32, Int32) -> Int32
        typealias SetTime =
            @convention(c) (Int32, Int32, UnsafePointer<itimerspec>?, UnsafeMutablePointer<itimerspec>?) -> Int32

        static let create: Create? = symbol("timerfd_create").map { unsafeBitCast($0, to: Create.self) }
        static let setTime: SetTime? = symbol("timerfd_settime").map { unsafeBitCast($0, to: SetTime.self) }

        static let cloexec = Int32(O_CLOEXEC)
        static let nonblock = Int32(O_NONBLOCK)
        static let absolute: Int32 = 1  // TFD_TIMER_ABSTIME
        static let cancelOnSet: Int32 = 2  // TFD_TIMER_CANCEL_ON_SET

        private static func symbol(_ name: String) -> UnsafeMutableRawPointer? {
            dlsym(dlopen(nil, RTLD_NOW), name)
        }
    }
#endif

extension SystemClock {
    /// The system wall clock for bgd: deadlines on `WallClockAlarm` (no periodic nap), and time
    /// that passes (`sleep(for:)`, `sleep(untilElapsed:)`) on NIO's event-loop timers. Before,
    /// the latter went through `Task.sleep`, so the first one (the conditions poll, an event
    /// stream's keep-alive) started libdispatch's monitor, which woke an idle bgd every second.
    public static func withAlarm() -> SystemClock {
        var clock = onEventLoops()
        if let alarm = WallClockAlarm.shared { clock.sleepUntil = { try await alarm.sleep(until: $0) } }
        return clock
    }
}
