import Foundation
import QuietThreads

#if canImport(Glibc)
    import Glibc
#endif

/// Hears from the kernel when power or network may have changed, so the conditions are read
/// again then instead of on a short poll (issue 17: an idle bgd must not wake every minute).
///
/// Two netlink sockets, both broadcast by the kernel without udevd: `NETLINK_KOBJECT_UEVENT`
/// (group 1: the kernel's own uevents; a power supply announces plugging, unplugging and charge
/// changes as `SUBSYSTEM=power_supply`) and `NETLINK_ROUTE` (links going up or down, addresses
/// coming and going, routes: the default route, whose device NetworkManager is asked about,
/// comes after the address, and a hotspot joined was read unmetered until the poll). One thread
/// blocks in `poll` on them and costs nothing while nothing happens. A burst of messages (a link
/// coming up sends a dozen) is one change.
final class KernelChangeListener: @unchecked Sendable {
    // @unchecked: the descriptors are set once; the thread owns the sockets until `stop` tells it
    // to end, and the listener the stop pipe.
    private let sockets: [Int32]
    private let stopPipe: (read: Int32, write: Int32)

    /// Subsystems whose uevents can change what `SysfsConditions` reads.
    static let subsystems: Set<String> = ["power_supply", "net"]

    /// Starts listening; nil where netlink is not available (not Linux, or refused), and the
    /// caller polls instead.
    static func start(onChange: @escaping @Sendable (String) -> Void) -> KernelChangeListener? {
        #if os(Linux)
            guard let uevents = openNetlink(protocol: 15 /* NETLINK_KOBJECT_UEVENT */, groups: 1) else { return nil }
            // RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE
            guard
                let routes = openNetlink(
                    protocol: 0 /* NETLINK_ROUTE */, groups: 0x1 | 0x10 | 0x40 | 0x100 | 0x400)
            else {
                close(uevents)
                return nil
            }
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else {
                close(uevents)
                close(routes)
                return nil
            }
            for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
            let listener = KernelChangeListener(sockets: [uevents, routes], stopPipe: (ends[0], ends[1]))
            NamedThread.start("bgd-kernel-events") { listener.listen(onChange: onChange) }
            return listener
        #else
            return nil
        #endif
    }

    private init(sockets: [Int32], stopPipe: (read: Int32, write: Int32)) {
        self.sockets = sockets
        self.stopPipe = stopPipe
    }

    /// The pipe lives as long as the listener (the thread holds it while it runs): closed by a
    /// thread that ended early (a failed poll), its numbers could be another file's by the time
    /// `stop` wrote its byte — the store's, say.
    deinit {
        close(stopPipe.read)
        close(stopPipe.write)
    }

    /// Ends the thread; it closes the sockets on its way out.
    func stop() {
        var byte: UInt8 = 1
        _ = write(stopPipe.write, &byte, 1)
    }

    #if os(Linux)
        /// `struct sockaddr_nl` from <linux/netlink.h>, which Glibc's module does not carry.
        private struct NetlinkAddress {
            var family: sa_family_t
            var pad: UInt16 = 0
            /// 0: the kernel assigns the port id.
            var portID: UInt32 = 0
            var groups: UInt32
        }

        private static func openNetlink(protocol netlinkProtocol: Int32, groups: UInt32) -> Int32? {
            let descriptor = socket(
                AF_NETLINK, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue),
                netlinkProtocol)
            guard descriptor >= 0 else { return nil }
            var address = NetlinkAddress(family: sa_family_t(AF_NETLINK), groups: groups)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<NetlinkAddress>.size)) == 0
                }
            }
            guard bound else {
                close(descriptor)
                return nil
            }
            return descriptor
        }

        private func listen(onChange: @Sendable (String) -> Void) {
            defer {
                for descriptor in sockets { close(descriptor) }
            }
            var entries = (sockets + [stopPipe.read]).map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            var buffer = [UInt8](repeating: 0, count: 16 * 1024)
            while true {
                for index in entries.indices { entries[index].revents = 0 }
                guard poll(&entries, nfds_t(entries.count), -1) >= 0 || errno == EINTR else { return }
                if entries.last!.revents != 0 { return }
                var changes: Set<String> = []
                // Drain both sockets: a burst becomes one refresh.
                for (index, descriptor) in sockets.enumerated() where entries[index].revents != 0 {
                    while case let count = recv(descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT)), count != 0 {
                        if count < 0 {
                            // ENOBUFS: the kernel dropped messages for us; something changed.
                            if errno == ENOBUFS { changes.insert("a burst the kernel could not queue") }
                            break
                        }
                        if index == 0 {
                            if let subsystem = Self.subsystem(ofUevent: buffer[0..<count]),
                                Self.subsystems.contains(subsystem)
                            {
                                changes.insert(Self.cause(ofUevent: subsystem))
                            }
                        } else {
                            changes.insert("a network link, address or route")
                        }
                    }
                }
                if !changes.isEmpty { onChange(changes.sorted().joined(separator: ", ")) }
            }
        }
    #endif

    /// How a uevent of `subsystem` is named to `onChange` (alone, when nothing else came with it).
    static func cause(ofUevent subsystem: String) -> String { "\(subsystem) uevent" }

    /// A kernel uevent is "action@devpath" then NUL-separated KEY=value lines; its SUBSYSTEM.
    static func subsystem(ofUevent message: ArraySlice<UInt8>) -> String? {
        for field in message.split(separator: 0) {
            let text = String(decoding: field, as: UTF8.self)
            if text.hasPrefix("SUBSYSTEM=") { return String(text.dropFirst("SUBSYSTEM=".count)) }
        }
        return nil
    }
}
