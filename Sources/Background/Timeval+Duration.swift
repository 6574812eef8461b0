#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension timeval {
    /// A socket timeout of `duration` (`SO_SNDTIMEO`, `SO_RCVTIMEO`), at most a day; never
    /// zero, which means "no limit".
    init(_ duration: Duration) {
        self.init(
            tv_sec: .init(min(duration.components.seconds, 86400)),
            tv_usec: .init(duration.components.attoseconds / 1_000_000_000_000))
        if tv_sec <= 0 && tv_usec <= 0 { (tv_sec, tv_usec) = (0, 1) }
    }
}
