import BackgroundModel
import Testing

@testable import Background

/// Which events the library takes to hand to the app: each once, whatever order bgd's stream
/// brings them in.
struct TakenEventsTests {
    func seq(_ value: Int64) -> EventSequence { EventSequence(rawValue: value) }

    /// An event another process of the app held — or one of a run given to this process after
    /// it was written — comes after later ones: it is handled, not taken for one handled before.
    /// Before, anything below the highest event handled was acknowledged unhandled.
    @Test func anEarlierEventThatComesLaterIsHandled() {
        var events = TakenEvents()
        #expect(events.take(seq(6)) == .new)
        events.finish(seq(6))
        #expect(events.take(seq(5)) == .new, "5 was never handled here")
        #expect(events.take(seq(5)) == .beingHandled)
        events.finish(seq(5))
        #expect(events.take(seq(5)) == .handledBefore)
        #expect(events.take(seq(6)) == .handledBefore)
    }

    /// Taken and not finished when the connection ended: sent again, it is taken anew.
    @Test func whatTheConnectionsEndCutOffIsTakenAnew() {
        var events = TakenEvents()
        #expect(events.take(seq(1)) == .new)
        #expect(events.take(seq(2)) == .new)
        events.finish(seq(2))
        events.giveUpUnfinished()
        #expect(events.handling.isEmpty)
        #expect(events.take(seq(1)) == .new)
        #expect(events.take(seq(2)) == .handledBefore, "finished before the end")
    }

    /// A process handling events for months remembers a bounded number: the latest
    /// `remembered` at least, and never more than twice as many.
    @Test func theMemoryIsBounded() {
        var events = TakenEvents()
        let count = Int64(TakenEvents.remembered * 5)
        for value in 1...count {
            _ = events.take(seq(value))
            events.finish(seq(value))
        }
        #expect(events.take(seq(count - Int64(TakenEvents.remembered) + 1)) == .handledBefore)
        #expect(events.take(seq(1)) == .new, "forgotten long ago")
    }
}
