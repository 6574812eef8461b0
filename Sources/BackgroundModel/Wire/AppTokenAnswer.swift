/// An app's token (`GET /v1/apps/{id}/token`, and a new one from `POST`): what a foreground app
/// connects with; bgd keeps it in the app's container too (`DaemonLocation.appTokenPath`).
public struct AppTokenAnswer: Hashable, Codable, Sendable {
    public var app: AppID
    public var token: String

    public init(app: AppID, token: String) {
        self.app = app
        self.token = token
    }
}
