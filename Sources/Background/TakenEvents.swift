import BackgroundModel

/// The events of bgd's stream this process took to handle, and those it finished.
///
/// bgd sends an app's events in order of their numbers, but not always to one stream in that
/// order: an event another process of the app held (and left unhandled when it went), or one of a
/// run given to this process after the event was written, reaches it after later ones. So an
/// event is known handled by its number, not by being below the highest one handled. Before, it
/// was by the highest: such an event was taken for one handled before, and acknowledged
/// unhandled — a fetch never ran, a download was lost.
struct TakenEvents {
    enum Taking { case new, beingHandled, handledBefore }

    /// How many finished events are remembered. bgd sends an event again only while it is open:
    /// a finished one when its acknowledgement was lost (sent again at the next connection) or
    /// raced the acknowledgement. The ones before these were acknowledged long ago.
    static let remembered = 4096

    /// Taken and not finished: one bgd sends again meanwhile is not taken twice.
    private(set) var handling: Set<EventSequence> = []
    private var finished: Set<EventSequence> = []
    /// `finished` in the order they were, to forget the oldest.
    private var finishedInOrder: [EventSequence] = []

    /// Takes `seq` to handle, unless it is being handled now or was finished before (bgd sends
    /// it again when the acknowledgement was lost).
    mutating func take(_ seq: EventSequence) -> Taking {
        if handling.contains(seq) { return .beingHandled }
        if finished.contains(seq) { return .handledBefore }
        handling.insert(seq)
        return .new
    }

    /// `seq` is handled (or answered, the answer kept to send again): sent again, it is not
    /// handled twice.
    mutating func finish(_ seq: EventSequence) {
        handling.remove(seq)
        guard finished.insert(seq).inserted else { return }
        finishedInOrder.append(seq)
        if finishedInOrder.count > Self.remembered * 2 {
            let forgotten = finishedInOrder.count - Self.remembered
            finished.subtract(finishedInOrder.prefix(forgotten))
            finishedInOrder.removeFirst(forgotten)
        }
    }

    /// The connection ended: what was taken and not finished is given up, and taken anew when
    /// bgd sends it again.
    mutating func giveUpUnfinished() { handling.removeAll() }
}
