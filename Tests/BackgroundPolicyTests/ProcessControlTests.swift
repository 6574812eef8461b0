import BackgroundModel
import BackgroundPolicy
import Foundation
import Testing

/// `ProcessControl` as tables: a phase, a step, the action and the phase after it.
struct ProcessControlTests {
    /// A moment on the clock's `elapsed`, `seconds` after the test's start.
    static func at(_ seconds: Double) -> Duration { .seconds(1000) + .milliseconds(Int64(seconds * 1000)) }

    enum Step: CustomStringConvertible {
        case freeze, thaw, kill, exited, spare
        case end(after: Double, grace: Double, at: Double)
        case terminate(killAt: Double, at: Double)
        case tick(at: Double)

        var description: String {
            switch self {
            case .freeze: "freeze"
            case .thaw: "thaw"
            case .kill: "kill"
            case .spare: "spare"
            case .exited: "exited"
            case .end(let after, let grace, let at): "end(after: \(after), grace: \(grace)) at \(at)"
            case .terminate(let killAt, let at): "terminate(killAt: \(killAt)) at \(at)"
            case .tick(let at): "tick at \(at)"
            }
        }

        func apply(to control: inout ProcessControl) -> ProcessControl.Action {
            switch self {
            case .freeze: control.freeze()
            case .thaw: control.thaw()
            case .kill: control.kill()
            case .spare: control.spare()
            case .exited:
                {
                    control.exited(); return .none
                }()
            case .end(let after, let grace, let at):
                control.end(after: .seconds(after), grace: .seconds(grace), now: ProcessControlTests.at(at))
            case .terminate(let killAt, let at):
                control.terminate(killAt: ProcessControlTests.at(killAt), now: ProcessControlTests.at(at))
            case .tick(let at): control.tick(now: ProcessControlTests.at(at))
            }
        }
    }

    typealias Row = (from: ProcessControl.Phase, step: Step, action: ProcessControl.Action, to: ProcessControl.Phase)

    static let rows: [Row] = [
        // Suspension: only a running process freezes; only a frozen one thaws.
        (.running, .freeze, .freeze, .frozen),
        (.frozen, .freeze, .none, .frozen),
        (.frozen, .thaw, .thaw, .running),
        (.running, .thaw, .none, .running),
        (.terminating(killAt: at(5)), .freeze, .none, .terminating(killAt: at(5))),
        (
            .exitRequested(terminateAt: at(5), killGrace: .seconds(2)), .freeze, .none,
            .exitRequested(terminateAt: at(5), killGrace: .seconds(2))
        ),
        (.exited, .freeze, .none, .exited),
        // An answered run: told to exit, SIGTERM after the linger, SIGKILL after the grace.
        (.running, .end(after: 5, grace: 2, at: 0), .none, .exitRequested(terminateAt: at(5), killGrace: .seconds(2))),
        (
            .exitRequested(terminateAt: at(5), killGrace: .seconds(2)), .tick(at: 4.9), .none,
            .exitRequested(terminateAt: at(5), killGrace: .seconds(2))
        ),
        (
            .exitRequested(terminateAt: at(5), killGrace: .seconds(2)), .tick(at: 5), .terminate,
            .terminating(killAt: at(7))
        ),
        (.terminating(killAt: at(7)), .tick(at: 6), .none, .terminating(killAt: at(7))),
        (.terminating(killAt: at(7)), .tick(at: 7), .kill, .killed),
        (.killed, .tick(at: 100), .none, .killed),
        // A frozen process asked to exit is thawed first, so that it can.
        (.frozen, .end(after: 5, grace: 2, at: 0), .thaw, .exitRequested(terminateAt: at(5), killGrace: .seconds(2))),
        (.frozen, .end(after: 0, grace: 2, at: 0), .terminate, .terminating(killAt: at(2))),
        // No delay: SIGTERM at once.
        (.running, .end(after: 0, grace: 2, at: 1), .terminate, .terminating(killAt: at(3))),
        // The earlier end stands, a later one changes nothing.
        (
            .exitRequested(terminateAt: at(5), killGrace: .seconds(2)), .end(after: 10, grace: 2, at: 0), .none,
            .exitRequested(terminateAt: at(5), killGrace: .seconds(2))
        ),
        (
            .exitRequested(terminateAt: at(5), killGrace: .seconds(2)), .end(after: 1, grace: 2, at: 0), .none,
            .exitRequested(terminateAt: at(1), killGrace: .seconds(2))
        ),
        (.terminating(killAt: at(3)), .end(after: 0, grace: 10, at: 1), .none, .terminating(killAt: at(3))),
        // A budget that ran out: SIGTERM now, SIGKILL at the kill time (at once when that is past).
        (.running, .terminate(killAt: 5, at: 0), .terminate, .terminating(killAt: at(5))),
        (.frozen, .terminate(killAt: 5, at: 0), .terminate, .terminating(killAt: at(5))),
        (
            .exitRequested(terminateAt: at(9), killGrace: .seconds(2)), .terminate(killAt: 5, at: 0), .terminate,
            .terminating(killAt: at(5))
        ),
        (.running, .terminate(killAt: 5, at: 6), .kill, .killed),
        (.terminating(killAt: at(9)), .terminate(killAt: 5, at: 0), .none, .terminating(killAt: at(5))),
        (.terminating(killAt: at(9)), .terminate(killAt: 5, at: 6), .kill, .killed),
        // A process kept for new work: a planned end is off, a SIGTERM sent is not.
        (.exitRequested(terminateAt: at(5), killGrace: .seconds(2)), .spare, .none, .running),
        (.terminating(killAt: at(5)), .spare, .none, .terminating(killAt: at(5))),
        (.frozen, .spare, .none, .frozen),
        // Kill: from anything alive; never twice; never a process already gone.
        (.running, .kill, .kill, .killed),
        (.frozen, .kill, .kill, .killed),
        (.terminating(killAt: at(9)), .kill, .kill, .killed),
        (.killed, .kill, .none, .killed),
        (.exited, .kill, .none, .exited),
        (.exited, .terminate(killAt: 5, at: 0), .none, .exited),
        (.exited, .end(after: 0, grace: 1, at: 0), .none, .exited),
        // Gone is gone, from wherever.
        (.terminating(killAt: at(9)), .exited, .none, .exited),
        (.frozen, .exited, .none, .exited),
    ]

    @Test(arguments: rows.indices)
    func row(_ index: Int) {
        let row = Self.rows[index]
        var control = ProcessControl(phase: row.from)
        let action = row.step.apply(to: &control)
        #expect(action == row.action, "\(row.from) · \(row.step)")
        #expect(control.phase == row.to, "\(row.from) · \(row.step)")
    }

    @Test func deadlinesAndEnding() {
        #expect(ProcessControl(phase: .running).nextDeadline == nil)
        #expect(
            ProcessControl(phase: .exitRequested(terminateAt: Self.at(5), killGrace: .seconds(1))).nextDeadline
                == Self.at(5))
        #expect(ProcessControl(phase: .terminating(killAt: Self.at(7))).nextDeadline == Self.at(7))
        #expect(!ProcessControl(phase: .frozen).isEnding)
        #expect(ProcessControl(phase: .terminating(killAt: Self.at(7))).isEnding)
        #expect(ProcessControl(phase: .exited).isEnding)
    }
}
