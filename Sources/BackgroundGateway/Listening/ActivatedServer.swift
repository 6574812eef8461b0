import HummingbirdCore
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization

/// Hummingbird's HTTP/1 server on a socket that is already listening (systemd's, by socket
/// activation): `Server` binds only addresses it is given, so this accepts on the descriptor and
/// hands each connection to the same `HTTP1Channel` the bound server uses. On a graceful
/// shutdown it stops accepting and asks every open connection to close once idle, as
/// Hummingbird's quiescing does — the socket itself stays open for systemd's next start.
struct ActivatedServer: Service {
    let socket: ActivatedSocket
    let responder: HTTPChannelHandler.Responder
    let onServerRunning: @Sendable (any Channel) async -> Void
    let logger: Logger

    func run() async throws {
        let http = HTTP1Channel(responder: responder)
        let connections = OpenConnections()
        let logger = self.logger
        // The listening socket is systemd's: bgd must not close it when it stops (a later start
        // gets the same one), so NIO gets a duplicate to own and close.
        let owned = dup(socket.descriptor)
        guard owned >= 0 else { throw IOError(errnoCode: errno, reason: "dup of the activated socket") }
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelOption(ChannelOptions.allowRemoteHalfClosure, value: true)
            .bind(NIOBSDSocket.Handle(owned)) { channel in
                connections.add(channel)
                return http.setup(channel: channel, logger: logger)
            }
        logger.info("Serving on the socket systemd passed", metadata: ["socket": "\(socket.path)"])
        await withGracefulShutdownHandler {
            await onServerRunning(server.channel)
            await withDiscardingTaskGroup { group in
                do {
                    try await server.executeThenClose { inbound in
                        for try await connection in inbound {
                            group.addTask { await http.handle(value: connection, logger: logger) }
                        }
                    }
                } catch {
                    logger.error("Accepting on the activated socket failed", metadata: ["error": "\(error)"])
                }
            }
        } onGracefulShutdown: {
            server.channel.close(promise: nil)
            connections.quiesce()
        }
    }
}

/// The connections an `ActivatedServer` has open, to ask each to close when idle at shutdown.
private final class OpenConnections: Sendable {
    private let channels = Mutex<[ObjectIdentifier: any Channel]>([:])

    func add(_ channel: any Channel) {
        let key = ObjectIdentifier(channel)
        channels.withLock { $0[key] = channel }
        channel.closeFuture.whenComplete { _ in self.channels.withLock { _ = $0.removeValue(forKey: key) } }
    }

    func quiesce() {
        for channel in channels.withLock({ Array($0.values) }) {
            channel.pipeline.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        }
    }
}
