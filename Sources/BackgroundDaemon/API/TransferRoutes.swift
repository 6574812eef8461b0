import BackgroundModel
import Foundation
import Hummingbird

/// Background transfers: an app's own (`/v1/app/transfers`) and the operator's view of all
/// (`/v1/transfers`, bgctl).
struct TransferRoutes {
    let transfers: Transfers

    func add(to router: Router<APIRequestContext>, appGroup: RouterGroup<APIRequestContext>) {
        let app = appGroup.group("transfers")
        app.post { request, context in
            var request = request
            let caller = Transfers.Caller.app(try context.appCaller().app)
            let transfer = try await request.decodeJSON(TransferRequest.self)
            return try JSONResponse.make(try await transfers.submit(transfer, from: caller), status: .created)
        }
        app.get { request, context in
            let session = request.uri.queryParameters["session"].map(String.init)
            return try JSONResponse.make(
                try await transfers.list(for: .app(try context.appCaller().app), session: session))
        }
        app.get(":transfer") { _, context in
            let caller = Transfers.Caller.app(try context.appCaller().app)
            return try JSONResponse.make(try await transfers.transfer(try context.parameters.transferID(), for: caller))
        }
        app.delete(":transfer") { _, context in
            let caller = Transfers.Caller.app(try context.appCaller().app)
            return try JSONResponse.make(try await transfers.cancel(try context.parameters.transferID(), by: caller))
        }
        app.post(":transfer/pause") { _, context in
            let caller = Transfers.Caller.app(try context.appCaller().app)
            return try JSONResponse.make(try await transfers.pause(try context.parameters.transferID(), by: caller))
        }
        app.post(":transfer/resume") { _, context in
            let caller = Transfers.Caller.app(try context.appCaller().app)
            return try JSONResponse.make(try await transfers.resume(try context.parameters.transferID(), by: caller))
        }

        let admin = router.group("v1/transfers")
        admin.get { request, _ in
            let limit = try request.uri.integerQuery("limit", default: 200, range: 1...10_000)
            return try JSONResponse.make(try await transfers.list(for: .operator, limit: limit))
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
            return try JSONResponse.make(
                try await transfers.submit(transfer, from: .operator, for: owner), status: .created)
        }
        admin.get(":transfer") { request, context in
            let (wait, transfer) = (try request.uri.waitQuery() ?? .zero, try context.parameters.transferID())
            return try await LongPoll.answer(request, waiting: wait) {
                try JSONResponse.make(try await transfers.transfer(transfer, for: .operator, waitingUpTo: wait))
            }
        }
        admin.delete(":transfer") { _, context in
            try JSONResponse.make(try await transfers.cancel(try context.parameters.transferID(), by: .operator))
        }
        admin.post(":transfer/pause") { _, context in
            try JSONResponse.make(try await transfers.pause(try context.parameters.transferID(), by: .operator))
        }
        admin.post(":transfer/resume") { _, context in
            try JSONResponse.make(try await transfers.resume(try context.parameters.transferID(), by: .operator))
        }
        admin.post(":transfer/retry") { _, context in
            try JSONResponse.make(try await transfers.retry(try context.parameters.transferID(), by: .operator))
        }
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
