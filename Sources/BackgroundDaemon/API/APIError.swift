import BackgroundModel
import BackgroundStore
import BackgroundTransfers
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1

/// An API failure as the client sees it: a status, a stable code and a sentence saying what to do.
struct APIError: Error, HTTPResponseError {
    var status: HTTPResponse.Status
    var code: APIErrorCode
    var reason: String

    init(_ status: HTTPResponse.Status, _ code: APIErrorCode, _ reason: String) {
        self.status = status
        self.code = code
        self.reason = reason
    }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        let body = try WireCoding.makeEncoder().encode(APIErrorBody(error: code.rawValue, reason: reason))
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: body)))
    }

    static func unknownApp(_ id: AppID) -> APIError {
        APIError(.notFound, .unknownApp, "no app \(id) is registered; `bgctl apps` lists them")
    }

    static let unauthorized = APIError(
        .unauthorized, .unauthorized,
        "missing or unknown app token: send 'Authorization: Bearer <token>' with the token `bgctl register` printed, "
            + "or the BGD_APP_TOKEN bgd gives a process it launches")

    /// A file bgd writes (an upload's copy, say) found the disk full.
    private static func diskFull(_ error: any Error) -> Bool {
        guard let refusal = error as? SafeFiles.Refusal else { return false }
        return refusal.systemError == ENOSPC || refusal.systemError == EDQUOT
    }

    /// Translates the errors of the layers below into what the client should read.
    static func from(_ error: any Error) -> APIError? {
        switch error {
        case let error as APIError: error
        case let error as ServiceError: APIError(error)
        case let refusal as Transfers.Refusal: APIError(refusal)
        case let error as HTTPParserError:
            // A body NIO's parser refused while the handler read it (a chunk size that is not one):
            // the client's fault, said as such, and nothing was done.
            APIError(.badRequest, .malformedRequest, "the request is not well-formed HTTP/1.1 (\(error)); nothing was done")
        case AppEvents.Refusal.neverSent(let seq, let last):
            APIError(.badRequest, .invalidSequence, "seq \(seq) was never sent; the last event is \(last)")
        case StoreError.appAlreadyRegistered(let id):
            APIError(
                .conflict, .appAlreadyRegistered,
                "\(id) is already registered; `bgctl register \(id) --replace -- …` (PUT /v1/apps/\(id)) changes it, keeping its history and token"
            )
        case StoreError.appNotFound(let id): .unknownApp(id)
        case StoreError.runNotFound(let id): APIError(.notFound, .unknownRun, "no run \(id) exists")
        case StoreError.runAlreadyInFlight(let id):
            APIError(
                .conflict, .runInFlight, "\(id) already has a run in flight; wait for it to end (`bgctl history \(id)`)"
            )
        case RunCoordinator.Failure.runNotFound(let id):
            APIError(.notFound, .unknownRun, "run \(id) does not exist or is not this app's")
        case RunCoordinator.Failure.runAlreadyEnded(let run):
            APIError(
                .conflict, .runAlreadyEnded,
                "run \(run.id) already ended as \(run.outcome?.rawValue ?? "?"); its first outcome stands")
        case let error as TaskSchedulerError:
            APIError(
                error == .notPermitted
                    ? .forbidden : error == .tooManyPendingTaskRequests ? .tooManyRequests : .conflict,
                APIErrorCode(error), error.description)
        case StoreError.taskRequestNotFound(let app, let identifier):
            APIError(
                .notFound, .unknownTaskRequest,
                "\(app) has no pending task request '\(identifier)'; `bgctl tasks` lists them")
        case let error where StorageTrouble(error) == .full || Self.diskFull(error):
            APIError(
                HTTPResponse.Status(code: 507, reasonPhrase: "Insufficient Storage"), .storageFull,
                "the disk holding bgd's state is full, so bgd takes nothing new; what it has is kept and still served. Free some space and try again"
            )
        case let refusal as SafeFiles.Refusal where refusal.systemError != nil && refusal.code == .fileError:
            // The disk's trouble (EIO, say), not the request's: the same request may go through later.
            APIError(
                .serviceUnavailable, .storageUnavailable,
                "bgd cannot write its files just now (\(refusal.description)); try again shortly")
        case let error where StorageTrouble(error) == .unavailable:
            APIError(
                .serviceUnavailable, .storageUnavailable,
                "bgd cannot write its state just now (an I/O error or a busy disk); try again shortly")
        case let refusal as SafeFiles.Refusal:
            // Every refusal has its code in the API's (APIErrorCodeTests).
            APIError(
                refusal.code == .destinationExists ? .conflict : .badRequest,
                APIErrorCode(rawValue: refusal.code.rawValue) ?? .fileError, refusal.description)
        case is NIOTooManyBytesError:
            APIError(
                .contentTooLarge, .bodyTooLarge, "request bodies are limited to \(APIRequestContext.bodyLimit) bytes")
        case let error as HTTPError where error.status == .notFound:
            APIError(.notFound, .notFound, "no such endpoint; the API lives under /v1/ (see docs/api.md)")
        case let error as HTTPError where error.status == .methodNotAllowed:
            APIError(.methodNotAllowed, .methodNotAllowed, "this endpoint does not take that method")
        case let error as any HTTPResponseError:
            APIError(error.status, .httpError, "\(error.status.reasonPhrase)")
        default: nil
        }
    }
}

extension APIError {
    init(_ error: ServiceError) {
        switch error {
        case .launchCommandNotFound(let program):
            self.init(
                .badRequest, .launchCommandNotFound,
                "\(program) is not an executable file; give an absolute path, or a name on bgd's PATH")
        case .tokenUnavailable(let app):
            self.init(
                .notFound, .tokenUnavailable,
                "\(app)'s token file is missing from its container (registered before bgd kept one): bgctl token \(app) --rotate makes a new one")
        case .noDeviceToken(let app):
            self.init(
                .notFound, .noDeviceToken,
                "\(app) has no device token: the app gets one with registerForRemoteNotifications(), or `bgctl push token \(app) --create` makes one")
        case .unknownProviderKey(let keyID):
            self.init(.notFound, .unknownProviderKey, "no provider key \(keyID) (bgctl push keys lists them)")
        case .unknownTransfer(let id):
            self.init(.notFound, .unknownTransfer, "no transfer \(id) (bgctl transfers lists them)")
        case .transferNotActive(let id):
            self.init(.conflict, .transferNotActive, "transfer \(id) has ended or is already paused")
        case .transferNotPaused(let id):
            self.init(.conflict, .transferNotPaused, "transfer \(id) is not paused")
        case .transferNotRetryable(let id, let why):
            self.init(.conflict, .transferNotRetryable, "transfer \(id) cannot be retried: \(why)")
        case .taskNotRunning(let app, let identifier):
            self.init(
                .notFound, .taskNotRunning, "\(app) is not running task '\(identifier)'; `bgctl tasks` shows what runs")
        case .tooManyStreams(let app):
            self.init(
                .tooManyRequests, .tooManyStreams,
                "\(app) holds \(EventBroker.maximumStreamsPerApp) event streams open already, the most an app may; close one (a process's streams close when it exits)"
            )
        case .tooManyTransfers(let app):
            self.init(
                .tooManyRequests, .tooManyTransfers,
                "\(app) has \(Transfers.maximumOutstandingPerApp) transfers outstanding already, the most an app may; cancel some, or wait for them to end"
            )
        case .tooManyBackgroundTasks(let app):
            self.init(
                .tooManyRequests, .tooManyBackgroundTasks,
                "\(app) holds \(LifecycleSupervisor.maximumBackgroundTasksPerApp) background tasks already, the most an app may; end the ones it is done with (endBackgroundTask)"
            )
        case .tooManyUnacknowledgedEvents(let app):
            self.init(
                .tooManyRequests, .tooManyUnacknowledgedEvents,
                "\(app) has left \(Transfers.maximumUnacknowledgedEventsPerApp) events unacknowledged, the most an app may; acknowledge the events it has handled (POST /v1/app/events/ack) before starting more transfers"
            )
        case .uploadQuotaExceeded(_, _, let size, let quota) where size > quota:
            self.init(
                .contentTooLarge, .uploadTooLarge,
                "the file is \(ByteCount.describe(size)), more than the \(ByteCount.describe(quota)) of uploads bgd holds for one app (bgd --upload-quota); send it in parts, or raise the quota")
        case .uploadQuotaExceeded(let app, let held, let size, let quota):
            self.init(
                .tooManyRequests, .tooManyUploadBytes,
                "\(app)'s waiting uploads hold \(ByteCount.describe(held)) already, and this one (\(ByteCount.describe(size))) would pass the \(ByteCount.describe(quota)) bgd holds for one app (bgd --upload-quota); wait for some to end, or cancel some")
        case .unknownBackgroundTask(let number):
            self.init(
                .notFound, .unknownBackgroundTask,
                "the app holds no background task \(number) (ended already, or never begun)")
        case .backgroundTimeExpired(let detail): self.init(.conflict, .backgroundTimeExpired, detail)
        case .dashboardOff:
            self.init(.conflict, .dashboardOff, "bgd serves no dashboard; start it with --http 127.0.0.1:8765")
        }
    }

    init(_ refusal: Transfers.Refusal) {
        switch refusal {
        case .destinationNotAllowed(forApp: true):
            self.init(
                .badRequest, .destinationNotAllowed,
                "an app's downloads land in its container and are offered in didFinishDownloadingTo")
        case .destinationNotAllowed(forApp: false):
            self.init(
                .badRequest, .destinationNotAllowed,
                "an app's download lands in its container; drop 'destination' or '?app='")
        case .destinationRequired:
            self.init(.badRequest, .destinationRequired, "a download for no app needs 'destination', an absolute path")
        case .invalid(let problem): self.init(.badRequest, .invalidTransfer, problem)
        }
    }
}

/// Turns every error into the API's JSON shape; anything unexpected becomes a 500 without
/// internals (no SQL text reaches a client) and is logged.
struct APIErrorMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        do {
            return try await next(request, context)
        } catch {
            if let apiError = APIError.from(error) { return try apiError.response(from: request, context: context) }
            context.logger.error("Request failed", metadata: ["error": "\(error)", "path": "\(request.uri.path)"])
            return try APIError(.internalServerError, .internal, "bgd failed to handle the request; its log says why")
                .response(from: request, context: context)
        }
    }
}

extension APIErrorCode {
    /// BGTaskScheduler's errors keep their own names on the wire.
    init(_ error: TaskSchedulerError) {
        switch error {
        case .unavailable: self = .unavailable
        case .tooManyPendingTaskRequests: self = .tooManyPendingTaskRequests
        case .notPermitted: self = .notPermitted
        }
    }
}
