import Foundation

/// SIGTERM and SIGINT, received by `sigwait` on a thread of their own and blocked everywhere
/// else: no libdispatch signal source (ServiceLifecycle's), whose manager thread would wake the
/// process every second. Started first thing in main, so every thread after inherits the mask.
public final class SignalWaiter: @unchecked Sendable {
    public static let shared = SignalWaiter()

    // @unchecked: the fields are only touched with `lock` held.
    private let lock = NSLock()
    private var action: (@Sendable () -> Void)?
    private var pending = false

    /// Blocks `signals` in this thread (and so in every thread started after) and waits for them
    /// on a thread named `name`.
    public func start(_ signals: [Int32], threadName name: String) {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        pthread_sigmask(SIG_BLOCK, &set, nil)
        let waiting = set
        NamedThread.start(name) { [self] in
            var set = waiting
            var received: Int32 = 0
            while true {
                if sigwait(&set, &received) == 0 { fire() }
            }
        }
    }

    /// What a signal does, once the process can stop; a signal that came before fires it at once.
    public func onSignal(_ action: @escaping @Sendable () -> Void) {
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
