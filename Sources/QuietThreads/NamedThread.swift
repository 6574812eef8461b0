import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Starts threads under a name `top -H`, `ps -L`, /proc and debuggers show. Foundation on Linux
/// keeps `Thread.name` to itself: the kernel's name stays the creating thread's (an event-loop
/// thread's, for most of bgd's), so the thread names itself once it runs.
public enum NamedThread {
    /// Runs `body` on a new thread named `name` (the kernel keeps its first 15 bytes).
    public static func start(_ name: String, _ body: @escaping @Sendable () -> Void) {
        let thread = Thread {
            #if os(Linux)
                _ = setName(pthread_self(), String(name.utf8.prefix(15))!)
            #endif
            body()
        }
        thread.name = name
        thread.start()
    }
}

#if os(Linux)
    // Declared only under _GNU_SOURCE, which Swift's Glibc module does not define.
    @_silgen_name("pthread_setname_np")
    private func setName(_ thread: pthread_t, _ name: UnsafePointer<CChar>) -> Int32
#endif
