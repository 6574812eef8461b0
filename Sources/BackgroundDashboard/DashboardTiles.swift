import BackgroundModel
import Foundation

/// The overview's first row: how many apps and how many in trouble, what runs now, what failed
/// in the last day, transfers moving, events waiting for apps, and which bgd this is.
public struct DashboardTiles: Sendable {
    public var status: DaemonStatus
    public var appsInTrouble: Int
    public var failuresInLastDay: Int
    public var activeTransfers: Int
    /// Events stored for apps and not yet acknowledged.
    public var outboxDepth: Int

    public init(
        status: DaemonStatus, appsInTrouble: Int, failuresInLastDay: Int, activeTransfers: Int, outboxDepth: Int
    ) {
        self.status = status
        self.appsInTrouble = appsInTrouble
        self.failuresInLastDay = failuresInLastDay
        self.activeTransfers = activeTransfers
        self.outboxDepth = outboxDepth
    }

    func html() -> String {
        func tile(_ id: String, _ value: String, _ label: String, trouble: Bool = false) -> String {
            "<div class=\"tile\(trouble ? " trouble" : "")\" id=\"tile-\(id)\"><b>\(HTML.escape(value))</b><span>\(HTML.escape(label))</span></div>"
        }
        let uptime = Duration.seconds(max(0, status.now.timeIntervalSince(status.startedAt)).rounded())
        var html = "<section id=\"tiles\" class=\"tiles\" aria-label=\"summary\">"
        html += tile(
            "apps", "\(status.appCount)",
            appsInTrouble > 0 ? "apps, \(appsInTrouble) in trouble" : "apps", trouble: appsInTrouble > 0)
        html += tile("running", "\(status.runningRuns)", status.runningRuns == 1 ? "run in flight" : "runs in flight")
        html += tile(
            "failures", "\(failuresInLastDay)", "failed, crashed or expired in 24 h", trouble: failuresInLastDay > 0)
        html += tile("transfers", "\(activeTransfers)", "transfers active")
        html += tile("outbox", "\(outboxDepth)", "events waiting for apps")
        html += "<div class=\"tile wide\" id=\"tile-bgd\"><b>bgd \(HTML.escape(status.version))</b><span>"
        html += "pid \(status.processID) · up \(HTML.escape(uptime.humanDescription))"
        html += " · state <span class=\"code\">\(HTML.escape(status.stateDirectory))</span>"
        if let processes = status.appProcesses { html += " · \(HTML.escape(processes))" }
        html += "</span></div></section>"
        return html
    }
}
