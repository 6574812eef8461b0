import QuietThreads
import ServiceLifecycle

/// bgrelay's code pages go back to the kernel once it has been quiet for 30 s
/// (`IdleCodePages`): no provider request, enrollment or uplink round — what bgd does for its
/// own (an idle relay holding a device kept 46 MB resident, most of it code it ran once).
/// `BGRELAY_KEEP_CODE_PAGES=1` keeps them, to compare (`Serve.codePages` makes them).
struct CodePagesWhenQuiet: Service {
    let pages: IdleCodePages

    func run() async throws {
        await cancelWhenGracefulShutdown { await pages.run() }
    }
}
