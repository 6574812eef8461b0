import Foundation

/// SIGTERM and SIGINT, received by `sigwait` on a thread of their own and blocked everywhere
/// else: no libdispatch signal source (ServiceLifecycle's), whose manager thread would wake bgd
/// every second. Started first thing in main, so every thread after inherits the mask.
final class SignalWaiter: @unchecked Sendable {
    static let shared = SignalWaiter()

    // @unchecked: the fields are only touched with `lock` held.
    private let lock = NSLock()
    private var action: (@Sendable () -> Void)?
    private var pending = false

    func start(_ signals: [Int32]) {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
        let waiting = set
        let thread = Thread { [self] in
            var set = waiting
            var received: Int32 = 0
            while true {
                if sigwait(&set, &received) == 0 { fire() }
            }
        }
        thread.name = "bgd-signals"
        thread.start()
    }

    /// What a signal does, once bgd can stop; a signal that came before fires it at once.
    func onSignal(_ action: @escaping @Sendable () -> Void) {
        lock.lock()
        self.action = action
        let fireNow = pending
        lock.unlock()
        if fireNow { action() }
    }

    private func fire() {
        lock.lock()
        let action = self.action
        if action == nil { pending = true }
        lock.unlock()
        action?()
    }
}
