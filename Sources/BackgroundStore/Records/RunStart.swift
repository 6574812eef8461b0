import BackgroundModel
import BackgroundPolicy
import Foundation

/// What a run carries out, with what it needs: the one way every kind of run starts, in the
/// store (`startRun`), the coordinator (`start`) and, on the app's side, one handler per event.
public enum RunStart: Sendable, Equatable {
    /// A background fetch, scheduled or asked for.
    case fetch
    /// A background push: the queued push, taken with the run; its payload goes in the event.
    /// `allowance` is the app's throttle after this wake.
    case push(PushID, apnsID: String, payload: String, allowance: PushThrottle.Allowance?)
    /// The app's pending `BGTaskScheduler` request `identifier`, of `kind`, taken with the run;
    /// with `submittedAt`, only the request submitted then (one the app submitted anew since it
    /// was read, with another date or other needs, is not started under the old one's).
    case task(identifier: String, kind: TaskKind, submittedAt: Date? = nil)
    /// The app launched to hear of its ended transfers: no event of its own (they wait in the
    /// outbox already); it ends once the app has acknowledged them all.
    case events

    public var kind: RunKind {
        switch self {
        case .fetch: .fetch
        case .push: .push
        case .task: .task
        case .events: .events
        }
    }
}
