import AsyncHTTPClient
import BackgroundModel
import BackgroundRelay
import BackgroundTesting
import Crypto
import Foundation
import Synchronization
import Testing

/// A seeded campaign of the relay's faults, mixed at random as `Chaos/` mixes bgd's: three
/// `bgrelay` nodes on a PostgreSQL server of the test's own, a real bgd, and a provider posting
/// to every node all along, while nodes are killed (-9) and started again, nodes are stopped
/// past bgd's keep-alive and continued, PostgreSQL crashes and comes back, and bgd itself is
/// killed and started again. Then the checker: every push answered 200 reached bgd, none twice.
///
/// `BGRELAY_CHAOS_FAULTS` (6) and `BGRELAY_CHAOS_SEED` (1) make a longer or another campaign;
/// the schedule is printed, so a failing seed can be run again.
///
/// It failed in two of four full CI runs (session 14) — a push left pending through the settle
/// wait, and a run over its time limit while the wait went on — until sessions stopped reading
/// "after the last push sent" (`aPushThatCommitsAfterALaterOneIsStillSent`): under load, pushes
/// committed by two nodes at once became visible out of the order of their ids.
@Suite(
    .timeLimit(.minutes(5)),
    .enabled(if: TestPostgres.isAvailable, "needs PostgreSQL: eval \"$(Tests/Postgres/start.sh)\" (CI does)"))
struct PushRelayChaosTests {
    enum Fault: CustomStringConvertible {
        case killNode(Int, downFor: Double)
        case stallNode(Int, for: Double)
        case restartPostgres(downFor: Int)
        case killBGD

        var description: String {
            switch self {
            case .killNode(let node, let down): "kill -9 node\(node), start it again \(String(format: "%.1f", down)) s later"
            case .stallNode(let node, let seconds): "SIGSTOP node\(node) for \(String(format: "%.1f", seconds)) s"
            case .restartPostgres(let down): "crash PostgreSQL, down \(down) s"
            case .killBGD: "kill -9 bgd, start it again"
            }
        }
    }

    static func schedule(faults: Int, seed: UInt64) -> [(fault: Fault, calm: Double)] {
        var random = SeededRandom(seed: seed)
        // Every kind once first (in a seeded order), so a short campaign has them all.
        let kinds = Array(0..<4).shuffled(using: &random)
        return (0..<faults).map { index in
            let fault: Fault =
                switch index < kinds.count ? kinds[index] : Int.random(in: 0..<4, using: &random) {
                case 0: .killNode(Int.random(in: 0..<3, using: &random), downFor: Double.random(in: 0.5...3, using: &random))
                // Past bgd's keep-alive (2 s, answered within 2 s): the device moves away.
                case 1: .stallNode(Int.random(in: 0..<3, using: &random), for: Double.random(in: 3...7, using: &random))
                case 2: .restartPostgres(downFor: Int.random(in: 1...3, using: &random))
                default: .killBGD
                }
            return (fault, Double.random(in: 1...3, using: &random))
        }
    }

    /// Accepted pushes below which the campaign says too little.
    static let enoughAccepted = 50

    @Test func aSeededMixOfFaultsLosesAndDuplicatesNothing() async throws {
        let environment = ProcessInfo.processInfo.environment
        let faults = environment["BGRELAY_CHAOS_FAULTS"].flatMap { Int($0) } ?? 6
        let seed = environment["BGRELAY_CHAOS_SEED"].flatMap { UInt64($0) } ?? 1
        let schedule = Self.schedule(faults: faults, seed: seed)
        print("PushRelayChaosTests seed \(seed): " + schedule.map(\.fault.description).joined(separator: "; "))

        let postgres = try await PrivatePostgres.start()
        do {
            try await campaign(schedule, on: postgres)
        } catch {
            await postgres.stop()
            throw error
        }
        await postgres.stop()
    }

    private func campaign(_ schedule: [(fault: Fault, calm: Double)], on postgres: PrivatePostgres) async throws {
        let key = P256.Signing.PrivateKey()
        let fleet = try await Fleet.start(nodes: 3, database: postgres.url, key: key)
        defer { fleet.stop() }
        let clock = SystemClock()
        let issuedAt = clock.now
        var nodes = fleet.nodes
        var daemon = fleet.daemon

        // The provider: one sender per node, each at its own pace, so a stopped node holds up
        // only the pushes sent to it (as a provider with a connection per node would).
        let sent = Ledger()
        let (client, token, keyBytes) = (fleet.client, fleet.token, key.rawRepresentation)
        let pace = max(0.3, Double(schedule.count) * 0.03)
        var senders: [Task<Void, Never>] = []
        for port in nodes.map(\.providerPort) {
            senders.append(Task {
                // Each sender its own copy of the key (the type is not Sendable).
                guard let key = try? P256.Signing.PrivateKey(rawRepresentation: keyBytes) else { return }
                let provider = PushGatewayTests.Provider(
                    client: client, base: "https://localhost:\(port)", key: key, now: issuedAt)
                while !sent.stopped {
                    let id = sent.nextID()
                    let status = try? await provider.send(token: token, headers: [("apns-id", id)]).status
                    sent.record(id, status: status)
                    // About three pushes a second per node, fewer in a long campaign: what
                    // reaches bgd stays within what the checker reads back (1,000).
                    try? await clock.sleep(until: clock.now.addingTimeInterval(pace))
                }
            })
        }

        func pause(_ seconds: Double) async throws { try await clock.sleep(until: clock.now.addingTimeInterval(seconds)) }
        for (fault, calm) in schedule {
            switch fault {
            case .killNode(let index, let down):
                nodes[index].process.signal(SIGKILL)
                _ = await nodes[index].process.waitForExit()
                try await pause(down)
                nodes[index] = try await RelayProcess(
                    stateDirectory: nodes[index].stateDirectory, arguments: fleet.nodeArguments[index],
                    ports: (nodes[index].providerPort, nodes[index].uplinkPort))
            case .stallNode(let index, let seconds):
                nodes[index].process.signal(SIGSTOP)
                try await pause(seconds)
                nodes[index].process.signal(SIGCONT)
            case .restartPostgres(let down):
                try await postgres.restart(down: down)
            case .killBGD:
                daemon.signal(SIGKILL)
                _ = await daemon.waitForExit()
                daemon = try await DaemonProcess(
                    stateDirectory: daemon.stateDirectory, socketPath: daemon.socketPath,
                    arguments: fleet.daemonArguments)
            }
            try await pause(calm)
        }
        // On a loaded machine the faults may let few pushes through (45 once in CI, against
        // 77–99 in other runs): the provider goes on posting, now calm, until enough were
        // accepted for the checker to say something — within a minute.
        let enough = clock.now.addingTimeInterval(60)
        while sent.totals.accepted.count < Self.enoughAccepted, clock.now < enough { try await pause(0.5) }
        sent.stop()
        for sender in senders { await sender.value }

        let store = fleet.store
        // Its own deadline, well inside the time limit, so what stuck is printed if it comes.
        let deadline = clock.now.addingTimeInterval(90)
        _ = await eventuallyAsync {
            if clock.now > deadline { return true }
            return (try? await store.pushCounts()[.pending]) == nil
        }
        let settled = (try? await store.pushCounts()[.pending]) == nil
        if !settled {
            let device = try? await store.tokenOwner(fleet.token)?.device
            print("PushRelayChaosTests stuck:\n" + (await Fleet.diagnosis(
                store: store, daemon: daemon, api: fleet.api, nodes: nodes, device: device, stacks: true)))
        }
        let (count, accepted, unavailable) = sent.totals
        let report = try await FaultReport.check(
            accepted: accepted, sent: count, relay: store, bgd: fleet.api, app: PushRelayFaultTests.app)
        print("PushRelayChaosTests: \(report), answered 503 \(unavailable)")
        #expect(settled, "pushes were left pending: \(report)")
        #expect(report.lost.isEmpty && report.duplicated.isEmpty, "\(report)")
        #expect(report.storedEveryAccepted, "the relay lost a push it answered 200 to: \(report)")
        #expect(report.endedWithReason == 0, "none expires or is replaced here: \(report)")
        #expect(accepted.count >= Self.enoughAccepted, "too few pushes got through for the campaign to say much: \(report)")
        daemon.signal(SIGTERM)
        _ = await daemon.waitForExit()
    }
}

/// What the campaign's senders sent and how it was answered, shared by all of them.
private final class Ledger: Sendable {
    private struct State {
        var count = 0
        var accepted: [String] = []
        var unavailable = 0
        var stopped = false
    }
    private let state = Mutex(State())

    var stopped: Bool { state.withLock { $0.stopped } }
    func stop() { state.withLock { $0.stopped = true } }

    /// A new apns-id.
    func nextID() -> String {
        state.withLock { state in
            state.count += 1
            return String(format: "00000000-0000-4000-a000-%012d", state.count)
        }
    }

    func record(_ id: String, status: Int?) {
        state.withLock { state in
            if status == 200 { state.accepted.append(id) }
            if status == 503 { state.unavailable += 1 }
        }
    }

    var totals: (sent: Int, accepted: [String], unavailable: Int) {
        state.withLock { ($0.count, $0.accepted, $0.unavailable) }
    }
}
