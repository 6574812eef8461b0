import BackgroundModel
import BackgroundStore
import Foundation
import Hummingbird

/// Background transfers: an app's own (`/v1/app/transfers`, by token) and the operator's view of
/// all (`/v1/transfers`, bgctl). An app never sees, cancels or learns of another app's transfer.
struct TransferRoutes {
    let core: DaemonCore

    func add(to router: Router<APIRequestContext>, appGroup: RouterGroup<APIRequestContext>) {
        let app = appGroup.group("transfers")
        app.post { request, context in
            var request = request
            let bearer = try context.appCaller()
            let transfer = try await request.decodeJSON(TransferRequest.self)
            if transfer.destination != nil {
                throw APIError(
                    .badRequest, .destinationNotAllowed,
                    "an app's downloads land in its container and are offered in didFinishDownloadingTo")
            }
            return try JSONResponse.make(try await submit(transfer, for: bearer.app), status: .created)
        }
        app.get { request, context in
            let bearer = try context.appCaller()
            let session = request.uri.queryParameters["session"].map(String.init)
            return try JSONResponse.make(try await core.store.transfers(app: bearer.app, session: session))
        }
        app.get(":transfer") { request, context in
            let bearer = try context.appCaller()
            return try JSONResponse.make(try await own(try context.parameters.transferID(), by: bearer.app).record)
        }
        app.delete(":transfer") { request, context in
            let bearer = try context.appCaller()
            let id = try await own(try context.parameters.transferID(), by: bearer.app).record.id
            return try JSONResponse.make(try await cancel(id))
        }
        app.post(":transfer/pause") { request, context in
            let bearer = try context.appCaller()
            let id = try await own(try context.parameters.transferID(), by: bearer.app).record.id
            guard let data = try await core.transfers.pause(id) else {
                throw APIError(.conflict, .transferNotActive, "transfer \(id) has ended or is already paused")
            }
            return try JSONResponse.make(data)
        }
        app.post(":transfer/resume") { request, context in
            let bearer = try context.appCaller()
            let id = try await own(try context.parameters.transferID(), by: bearer.app).record.id
            guard let record = try await core.transfers.resume(id) else {
                throw APIError(.conflict, .transferNotPaused, "transfer \(id) is not paused")
            }
            return try JSONResponse.make(record)
        }

        let admin = router.group("v1/transfers")
        admin.get { request, _ in
            let limit = try request.uri.integerQuery("limit", default: 200, range: 1...10_000)
            var records: [TransferRecord] = []
            for record in try await core.store.transfers(limit: limit) {
                records.append(await core.transfers.live(record))
            }
            return try JSONResponse.make(records)
        }
        admin.post { request, _ in
            var request = request
            let owner = try request.uri.queryParameters["app"].map { raw -> AppID in
                guard let id = AppID(rawValue: String(raw)) else {
                    throw APIError(.badRequest, .invalidAppID, AppID.requirement)
                }
                return id
            }
            let transfer = try await request.decodeJSON(TransferRequest.self)
            if let owner {
                _ = try await core.requireApp(owner)
                if transfer.destination != nil {
                    throw APIError(
                        .badRequest, .destinationNotAllowed,
                        "an app's download lands in its container; drop 'destination' or '?app='")
                }
            } else if transfer.kind == .download {
                guard let destination = transfer.destination, destination.hasPrefix("/") else {
                    throw APIError(
                        .badRequest, .destinationRequired, "a download for no app needs 'destination', an absolute path"
                    )
                }
                _ = destination  // checked where it is used: TransferService.checkedDestination
            }
            return try JSONResponse.make(try await submit(transfer, for: owner), status: .created)
        }
        admin.get(":transfer") { request, context in
            let id = try context.parameters.transferID()
            return try JSONResponse.make(
                await core.transfers.live(try await waitForEnd(of: id, timeout: try request.uri.waitQuery() ?? .zero)))
        }
        admin.delete(":transfer") { _, context in
            try JSONResponse.make(try await cancel(try context.parameters.transferID()))
        }
    }

    private func submit(_ transfer: TransferRequest, for app: AppID?) async throws -> TransferRecord {
        if let problem = transfer.problem { throw APIError(.badRequest, .invalidTransfer, problem) }
        return try await core.transfers.submit(transfer, from: app)
    }

    /// The transfer; with `?wait=S`, once it has ended or S seconds have passed on bgd's clock.
    private func waitForEnd(of id: TransferID, timeout: Duration) async throws -> TransferRecord {
        let feed = core.activity.subscribe()  // before reading the store, so the end cannot slip between
        guard let current = try await core.store.transfer(id)?.record else { throw APIError.unknownTransfer(id) }
        if current.state.isFinal || timeout <= .zero { return current }
        let ended = try await core.firstActivity(in: feed, within: timeout) { activity -> TransferRecord? in
            if case .transferEnded(let record) = activity, record.id == id { return record }
            return nil
        }
        if let ended { return ended }
        return try await core.store.transfer(id)?.record ?? current
    }

    private func cancel(_ id: TransferID) async throws -> TransferRecord {
        guard let record = try await core.transfers.cancel(id) else { throw APIError.unknownTransfer(id) }
        return record
    }

    /// The transfer, if it is the app's; another app's is "unknown", not "forbidden", so that
    /// ids reveal nothing.
    private func own(_ id: TransferID, by app: AppID) async throws -> StoredTransfer {
        guard let stored = try await core.store.transfer(id), stored.record.app == app else {
            throw APIError.unknownTransfer(id)
        }
        return stored
    }
}

extension APIError {
    static func unknownTransfer(_ id: TransferID) -> APIError {
        APIError(.notFound, .unknownTransfer, "no transfer \(id) (bgctl transfers lists them)")
    }
}

extension Parameters {
    func transferID() throws -> TransferID {
        guard let raw = get("transfer"), let value = Int64(raw), value > 0 else {
            throw APIError(.badRequest, .invalidTransferID, "a transfer id is a positive integer")
        }
        return TransferID(value)
    }
}
