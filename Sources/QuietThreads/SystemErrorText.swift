import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What went wrong with a file, in the system's words ("Permission denied", "Not a directory"),
/// for an error a person reads. Foundation's file errors print on Linux as a dump
/// (`Error Domain=NSCocoaErrorDomain Code=513 "(null)" UserInfo={…}`) that names neither. Here,
/// not in BackgroundModel, because it reads the C library's `strerror`.
public enum SystemErrorText {
    public static func describe(_ error: any Error) -> String {
        if let posix = error as? POSIXError { return String(cString: strerror(posix.code.rawValue)) }
        let error = error as NSError
        if error.domain == NSPOSIXErrorDomain { return String(cString: strerror(Int32(error.code))) }
        // Linux keeps the cause as a Swift `POSIXError`; Darwin as an NSError of that domain.
        switch error.userInfo[NSUnderlyingErrorKey] {
        case let posix as POSIXError: return String(cString: strerror(posix.code.rawValue))
        case let underlying as NSError where underlying.domain == NSPOSIXErrorDomain:
            return String(cString: strerror(Int32(underlying.code)))
        default: break
        }
        if error.domain == NSCocoaErrorDomain {
            switch CocoaError.Code(rawValue: error.code) {
            case .fileNoSuchFile, .fileReadNoSuchFile: return String(cString: strerror(ENOENT))
            case .fileWriteNoPermission, .fileReadNoPermission: return String(cString: strerror(EACCES))
            case .fileWriteOutOfSpace: return String(cString: strerror(ENOSPC))
            case .fileWriteVolumeReadOnly: return String(cString: strerror(EROFS))
            default: break
            }
        }
        return "\(error.localizedDescription) (\(error.domain) \(error.code))"
    }
}
