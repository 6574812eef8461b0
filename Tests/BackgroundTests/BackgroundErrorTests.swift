import BackgroundModel
import Testing

@testable import Background

/// What an app matches on when bgd refuses: typed codes, and a code this library does not know
/// yet still readable as text.
struct BackgroundErrorTests {
    @Test func apiErrorsCarryTheirTypedCode() {
        let error = BackgroundError.api(status: 409, code: "runAlreadyEnded", reason: "run 7 already ended")
        #expect(error.apiErrorCode == .runAlreadyEnded && error.httpStatus == 409)
        #expect(error.description == "run 7 already ended")
        let newer = BackgroundError.api(status: 400, code: "somethingNewer", reason: "…")
        #expect(newer.apiErrorCode == nil && newer.apiCode == "somethingNewer")
        #expect(BackgroundError.disconnected.apiErrorCode == nil && BackgroundError.disconnected.httpStatus == nil)
    }

    @Test func errorsCompareByKindNotByWording() {
        #expect(
            BackgroundError.api(status: 404, code: "unknownApp", reason: "a")
                == .api(status: 404, code: "unknownApp", reason: "b"))
        #expect(BackgroundError.daemonUnreachable("/a", "x") == .daemonUnreachable("/b", "y"))
        #expect(BackgroundError.daemonUnreachable("/a", "x") != .disconnected)
    }

    /// A foreground app whose token is not where it looks (a bgd on another --state-dir) is told
    /// how to give it one.
    @Test func aMissingTokenSaysHowToGiveOne() {
        let app = AppID(rawValue: "com.example.elsewhere")!
        #expect {
            try BackgroundApplication(appID: app, stateDirectory: "/nonexistent-bgd-state")
        } throws: { error in
            let text = "\(error)"
            return text.contains("/nonexistent-bgd-state/containers/com.example.elsewhere/app-token")
                && text.contains("BGD_APP_TOKEN") && text.contains("bgctl token com.example.elsewhere")
        }
    }
}
