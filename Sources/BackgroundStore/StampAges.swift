import BackgroundModel
import Foundation
import GRDB

/// How old a stored stamp is, for pruning: by the wall clock as it reads now, except across a
/// step of the wall clock forward that bgd saw. What was stamped before such a step is as old as
/// the time that really passed since, not older by the step: a clock set 100 days ahead by
/// mistake (or a device that booted with its clock in the past and was set right) would
/// otherwise make the next pass delete a month's history, the usage model's opens with it, for
/// days that did not pass — and setting the clock back brings none of it back.
///
/// A step stops mattering for an age once that much time has really passed since it: by then
/// everything stamped before it is older than the age by any count. Steps back need nothing: what
/// a clock behind stamps looks younger, and is kept longer, never lost.
public struct StampAges: Hashable, Sendable {
    /// A step of the wall clock forward.
    public struct ForwardStep: Hashable, Sendable {
        /// The wall clock's reading just before the step (at the latest: stamps made before it
        /// are at or before this).
        public var before: Date
        /// The time that really passed since the step (`WallClock.elapsed`), at the least.
        public var since: Duration

        public init(before: Date, since: Duration) {
            self.before = before
            self.since = since
        }
    }

    public var now: Date
    public var steps: [ForwardStep]

    public init(now: Date, steps: [ForwardStep] = []) {
        self.now = now
        self.steps = steps
    }

    /// An SQL condition that holds for the rows whose `column` is older than `age`, and its
    /// arguments: older by the wall clock, and not stamped before a step in the stretch that
    /// step makes younger than `age` (`before + since - age ... before`).
    func condition(_ column: String, olderThan age: Duration) -> (sql: String, arguments: StatementArguments) {
        var sql = "\(column) < ?"
        var arguments: StatementArguments = [now.addingTimeInterval(-age.seconds)]
        for step in steps where step.since < age {
            sql += " AND NOT (\(column) BETWEEN ? AND ?)"
            arguments += [step.before.addingTimeInterval((step.since - age).seconds), step.before]
        }
        return ("(\(sql))", arguments)
    }
}
