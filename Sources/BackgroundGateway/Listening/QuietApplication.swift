import BackgroundModel
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import Synchronization

/// Runs a Hummingbird responder the way `Application` does, minus its `DateCache`: that service
/// wakes every second to reformat the `Date` header, which in an idle bgd (three listeners)
/// was most of its wakeups. The header here is formatted when a response needs it, at most once
/// a second — an idle bgd does not wake for it at all.
package struct QuietApplication<Responder: HTTPResponder>: Service
where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
    let responder: Responder
    var server: HTTPServerBuilder = .http1()
    let configuration: ServerConfiguration
    var services: [any Service] = []
    var onServerRunning: @Sendable (any Channel) async -> Void = { _ in }
    let logger: Logger
    /// Serve on this already-listening socket (systemd's) instead of binding the configured address.
    var activated: ActivatedSocket? = nil

    package init(
        responder: Responder, server: HTTPServerBuilder = .http1(), configuration: ServerConfiguration,
        services: [any Service] = [], onServerRunning: @escaping @Sendable (any Channel) async -> Void = { _ in },
        logger: Logger, activated: ActivatedSocket? = nil
    ) {
        self.responder = responder
        self.server = server
        self.configuration = configuration
        self.services = services
        self.onServerRunning = onServerRunning
        self.logger = logger
        self.activated = activated
    }

    package func run() async throws {
        let responder = self.responder
        let logger = self.logger
        let serverName = configuration.serverName
        let respond: HTTPChannelHandler.Responder = { request, responseWriter, channel in
            let context = Responder.Context(source: .init(channel: channel, logger: logger))
            var response: Response
            do {
                response = try await responder.respond(to: request, context: context)
            } catch let error as HTTPParserError {
                throw error
            } catch {
                logger.debug("Unhandled error", metadata: ["error": "\(error)"])
                response = Response(status: .internalServerError)
            }
            response.headers[.date] = HTTPDateHeader.shared.value(now: SystemClock().now)
            if let serverName { response.headers[.server] = serverName }
            try await responseWriter.write(response: response.head, body: response.body)
        }
        let onServerRunning = self.onServerRunning
        let server: any Service =
            if let activated {
                ActivatedServer(socket: activated, responder: respond, onServerRunning: onServerRunning, logger: logger)
            } else {
                try self.server.buildServer(
                    configuration: configuration, eventLoopGroup: MultiThreadedEventLoopGroup.singleton, logger: logger,
                    responder: respond, onServerRunning: onServerRunning)
            }
        // A service that fails (a port in use) stops the others gracefully, not by cancelling
        // them: cancelled, Hummingbird's server logs an error of its own ("Waiting on child
        // channel: CancellationError()") beside the one that says what went wrong.
        let configured = (services + [server]).map {
            ServiceGroupConfiguration.ServiceConfiguration(service: $0, failureTerminationBehavior: .gracefullyShutdownGroup)
        }
        try await ServiceGroup(configuration: .init(services: configured, logger: logger)).run()
    }
}

/// The `Date` response header (RFC 9110 IMF-fixdate), formatted at most once a second.
final class HTTPDateHeader: Sendable {
    static let shared = HTTPDateHeader()
    private let cache = Mutex<(second: Int, text: String)>((-1, ""))

    func value(now: Date) -> String {
        let second = Int(now.timeIntervalSince1970)
        if let cached = cache.withLock({ $0.second == second ? $0.text : nil }) { return cached }
        let text = Self.format(now)
        cache.withLock { $0 = (second, text) }
        return text
    }

    static func format(_ date: Date) -> String {
        var time = time_t(Int(date.timeIntervalSince1970))
        var parts = tm()
        gmtime_r(&time, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return
            "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) "
            + "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }
}
