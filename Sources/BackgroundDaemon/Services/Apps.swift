import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation

#if canImport(Glibc)
    import Glibc
#endif
import Logging

/// The apps bgd knows: registering and unregistering them, their fetch interval, the user
/// opening them, and how the API shows them. Each change here carries its own consequences (the
/// container, the learner, the scheduler's doorbell), so no caller has to remember them.
struct Apps: Sendable {
    let store: BackgroundStore
    let stateDirectory: StateDirectory
    let broker: EventBroker
    let tokens: TokenIssuer
    let lifecycle: LifecycleSupervisor
    let coordinator: RunCoordinator
    let usage: UsageTracker
    let activity: ActivityFeed
    let clock: any WallClock
    /// Rung when anything the scheduler plans from changes.
    let schedulerDoorbell: Doorbell
    let logger: Logger
    /// The last app listing, encoded, with what it was read at.
    let listingCache = ListingCache()

    // MARK: Commands

    /// Registers an app and gives it its container; the token is shown once, here.
    func register(_ registration: RegisterAppRequest) async throws -> RegisteredApp {
        guard ProcessLauncher.isExecutable(registration.launchCommand.program) else {
            throw ServiceError.launchCommandNotFound(registration.launchCommand.program)
        }
        // Known already: refused before anything touches its container.
        if try await store.app(registration.id) != nil { throw StoreError.appAlreadyRegistered(registration.id) }
        let token = tokens.makeToken()
        // Staged before the commit, put in place after it (`TokenFile`): a crash between the two
        // leaves what the next bgd finishes. Without a file, the app can still be given its token
        // by hand, and `bgctl token --rotate` makes one.
        let staged: String?
        do {
            staged = try TokenFile.stage(token.rawValue, of: registration.id, in: stateDirectory)
        } catch {
            staged = nil
            logger.error("Cannot keep the app's token in its container", metadata: ["app.id": "\(registration.id)"])
        }
        let app: StoredApp
        do {
            app = try await store.register(registration, tokenHash: TokenIssuer.hash(token), now: clock.now)
        } catch {
            if let staged { unlink(staged) }
            throw error
        }
        Failpoint.appAfterTokenCommit.hit()
        if let staged {
            do { try TokenFile.install(staged) } catch {
                logger.error(
                    "Cannot put the app's token in its container for good; bgctl token APP --rotate makes a new one",
                    metadata: ["app.id": "\(registration.id)", "error": "\(error)"])
            }
        }
        activity.emit(.appRegistered(app.id))
        schedulerDoorbell.ring()
        logger.notice("App registered", metadata: ["app.id": "\(app.id)"])
        return RegisteredApp(app: try await summary(of: app), token: token.rawValue)
    }

    /// Changes an app's launch command, task identifiers and (if given) interval, keeping its
    /// history, usage learning, outbox, device token, container and token.
    func replace(_ registration: RegisterAppRequest) async throws -> RegisteredApp {
        guard ProcessLauncher.isExecutable(registration.launchCommand.program) else {
            throw ServiceError.launchCommandNotFound(registration.launchCommand.program)
        }
        let app = try await store.replaceRegistration(registration)
        schedulerDoorbell.ring()
        logger.notice("App registration replaced", metadata: ["app.id": "\(app.id)"])
        return RegisteredApp(app: try await summary(of: app), token: try await token(of: app.id))
    }

    /// The app's token, as its container's token file has it. An app bgd does not know is
    /// `unknownApp`, as everywhere else — not a token file to make with `--rotate`.
    func token(of id: AppID) async throws -> String {
        _ = try await require(id)
        let path = DaemonLocation.appTokenPath(of: id, stateDirectory: stateDirectory.path)
        guard let token = try? String(contentsOfFile: path, encoding: .utf8), !token.isEmpty else {
            throw ServiceError.tokenUnavailable(id)
        }
        return token.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// A new token for the app; the old one is refused at once, and connections made with it
    /// are closed (a launched process keeps its own launch token).
    func rotateToken(of id: AppID) async throws -> String {
        _ = try await require(id)
        let token = tokens.makeToken()
        let staged = try TokenFile.stage(token.rawValue, of: id, in: stateDirectory)
        do {
            try await store.setTokenHash(TokenIssuer.hash(token), for: id)
        } catch {
            unlink(staged)
            throw error
        }
        Failpoint.appAfterTokenCommit.hit()
        defer { broker.disconnect(id) }  // the old token is refused, whether or not the file is in place
        do { try TokenFile.install(staged) } catch { throw ServiceError.tokenUnavailable(id) }
        logger.notice("App token rotated", metadata: ["app.id": "\(id)"])
        return token.rawValue
    }

    /// Forgets an app and everything bgd holds for it; pushes to its device token answer 410 from now.
    func unregister(_ id: AppID) async throws {
        guard try await store.unregister(id, now: clock.now) else { throw StoreError.appNotFound(id) }
        await coordinator.appUnregistered(id)
        await lifecycle.forget(id)
        await usage.forget(id, now: clock.now)
        stateDirectory.removeContainer(for: id)
        activity.emit(.appUnregistered(id))
        schedulerDoorbell.ring()
        logger.notice("App unregistered", metadata: ["app.id": "\(id)"])
    }

    /// `setMinimumBackgroundFetchInterval`, from the app or the operator.
    func setFetchInterval(_ interval: FetchInterval, for id: AppID) async throws -> AppSummary {
        try await store.setFetchInterval(interval, for: id)
        schedulerDoorbell.ring()
        return try await summary(of: try await require(id))
    }

    /// The user opened the app: the store remembers, the learner learns, the scheduler replans
    /// (the user being active changes the chances of the other apps too). An open within a
    /// minute of the last one is the same use: it still thaws the app, but there is nothing new
    /// to learn or plan from (`BackgroundStore.openCoalescing`).
    func recordOpen(of id: AppID) async throws {
        let now = clock.now
        let recorded = try await store.recordOpen(of: id, at: now)
        if recorded { await usage.recordOpen(of: id, at: now) }
        await lifecycle.opened(id)
        if recorded { schedulerDoorbell.ring() }
    }

    /// Forgets what bgd learned of the app's use.
    func forgetUsage(of id: AppID) async throws {
        try await store.forgetOpens(of: id)
        await usage.forget(id, now: clock.now)
        schedulerDoorbell.ring()
    }

    // MARK: Read models

    func exists(_ id: AppID) async throws -> Bool { try await store.app(id) != nil }

    func require(_ id: AppID) async throws -> StoredApp {
        guard let app = try await store.app(id) else { throw StoreError.appNotFound(id) }
        return app
    }

    /// An app as the API shows it.
    func summary(of id: AppID) async throws -> AppSummary { try await summary(of: try await require(id)) }

    func summary(of app: StoredApp) async throws -> AppSummary {
        let plan = try await store.savedPlan(for: app.id)
        return AppSummary(
            id: app.id, launchCommand: app.launchCommand, fetchInterval: app.fetchInterval,
            registeredAt: app.registeredAt, isConnected: broker.isConnected(app.id),
            lastRun: try await store.runs(of: app.id, limit: 1).first, nextWake: plan?.decision.dueAt,
            nextWakeReasons: plan?.decision.reasons ?? [], containerPath: stateDirectory.containerPath(for: app.id),
            lifecycle: await lifecycle.status(of: app.id), taskIdentifiers: app.taskIdentifiers)
    }

    /// Every app as the API shows it: three statements and one look at the lifecycles, whatever
    /// the number of apps.
    func summaries() async throws -> [AppSummary] {
        let listing = try await store.appListing()
        let lifecycles = await lifecycle.statusesByApp().statuses
        return listing.map { entry in
            let app = entry.app
            return AppSummary(
                id: app.id, launchCommand: app.launchCommand, fetchInterval: app.fetchInterval,
                registeredAt: app.registeredAt, isConnected: broker.isConnected(app.id), lastRun: entry.lastRun,
                nextWake: entry.plan?.decision.dueAt, nextWakeReasons: entry.plan?.decision.reasons ?? [],
                containerPath: stateDirectory.containerPath(for: app.id), lifecycle: lifecycles[app.id],
                taskIdentifiers: app.taskIdentifiers)
        }
    }

    /// `GET /v1/apps` as JSON: encoded once, then served as is until the store commits, a stream
    /// opens or closes, or a lifecycle changes — a hundred clients asking at once cost one encoding.
    func encodedSummaries() async throws -> Data {
        // The key is read before the data: a change that lands meanwhile makes the key stale,
        // never the data newer than its key.
        let key = ListingCache.Key(
            commits: store.commits.current, connections: broker.connectionGeneration,
            lifecycles: await lifecycle.statusVersion)
        let apps = self
        return try await listingCache.data(for: key) { try WireCoding.makeEncoder().encode(try await apps.summaries()) }
    }

    /// When the user opened the app, oldest first.
    func opens(of id: AppID) async throws -> [Date] { try await store.opens(of: id) }

    /// What bgd has learned of the app's use (`bgctl usage`).
    func usageSummary(of id: AppID) async throws -> UsageSummary {
        _ = try await require(id)
        let opens = try await store.opens(of: id)
        let now = clock.now
        let model = UsageModel.learning(from: opens)
        return UsageSummary(
            app: id, opensRecorded: opens.count, firstOpen: opens.first, lastOpen: opens.last,
            opensPerDay: model.opensPerDay(now: now), sessionsPerDay: model.sessionsPerDay(now: now),
            busiestSlots: model.busiestSlots(limit: 8, now: now).map {
                UsageSummary.Slot(start: $0.start, sessionsPerDay: $0.sessionsPerDay)
            }, openChance: await usage.openChance(of: id, now: now))
    }
}
