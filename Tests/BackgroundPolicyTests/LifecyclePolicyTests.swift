import BackgroundModel
import BackgroundPolicy
import Foundation
import Testing

struct BackgroundTimePolicyTests {
    let start = Date(timeIntervalSince1970: 1_767_603_600)
    let policy = BackgroundTimePolicy()

    func snapshot(
        holdsTasks: Bool, warned: Bool = false, state: ApplicationState = .background, busy: Bool = false
    ) -> BackgroundTimePolicy.Snapshot {
        .init(state: state, enteredBackgroundAt: start, holdsTasks: holdsTasks, warned: warned, busy: busy)
    }

    @Test func aHeldTaskIsWarnedThenEnded() {
        #expect(policy.step(snapshot(holdsTasks: true), now: start) == .wait(until: start.addingTimeInterval(25)))
        #expect(
            policy.step(snapshot(holdsTasks: true), now: start.addingTimeInterval(25))
                == .warn(deadline: start.addingTimeInterval(30)))
        #expect(
            policy.step(snapshot(holdsTasks: true, warned: true), now: start.addingTimeInterval(26))
                == .wait(until: start.addingTimeInterval(30)))
        guard
            case .end(let reason) = policy.step(
                snapshot(holdsTasks: true, warned: true), now: start.addingTimeInterval(30))
        else {
            Issue.record("a task still held at the deadline ends the app")
            return
        }
        #expect(reason.code == .backgroundTimeOverrun)
    }

    @Test func nothingHeldIsSuspendedShortlyAfterLeavingTheForeground() {
        #expect(
            policy.step(snapshot(holdsTasks: false), now: start.addingTimeInterval(1))
                == .wait(until: start.addingTimeInterval(5)))
        guard case .suspend(let reason) = policy.step(snapshot(holdsTasks: false), now: start.addingTimeInterval(5))
        else {
            Issue.record("suspended after the delay")
            return
        }
        #expect(reason.code == .suspendedInBackground)
        let off = BackgroundTimePolicy(suspensionEnabled: false)
        #expect(
            off.step(snapshot(holdsTasks: false), now: start.addingTimeInterval(5))
                == .wait(until: start.addingTimeInterval(30)))
        if case .end(let reason) = off.step(snapshot(holdsTasks: false), now: start.addingTimeInterval(30)) {
            #expect(reason.code == .suspensionUnavailable)
        } else {
            Issue.record("with suspension off the app is ended when its time is up")
        }
    }

    @Test func theForegroundABusyAppAndAnUnsignallableOneAreLeftAlone() {
        #expect(policy.step(snapshot(holdsTasks: true, state: .active), now: start.addingTimeInterval(100)) == .none)
        #expect(
            policy.step(snapshot(holdsTasks: false, state: .suspended), now: start.addingTimeInterval(100)) == .none)
        #expect(policy.step(snapshot(holdsTasks: true, busy: true), now: start.addingTimeInterval(100)) == .none)
        var inside = snapshot(holdsTasks: true)
        inside.canSignal = false
        // Warned all the same.
        #expect(policy.step(inside, now: start.addingTimeInterval(25)) == .warn(deadline: start.addingTimeInterval(30)))
        #expect(policy.step(inside, now: start.addingTimeInterval(100)) == .none)
    }

    @Test func grants() throws {
        #expect(try policy.grant(state: .active, enteredBackgroundAt: nil, now: start).get() == nil)  // unlimited
        #expect(
            try policy.grant(state: .background, enteredBackgroundAt: start, now: start.addingTimeInterval(10)).get()
                == start.addingTimeInterval(30))
        #expect(throws: RefusedBackgroundTime.self) {
            try policy.grant(state: .background, enteredBackgroundAt: start, now: start.addingTimeInterval(30)).get()
        }
        #expect(throws: RefusedBackgroundTime.self) {
            try policy.grant(state: .suspended, enteredBackgroundAt: start, now: start).get()
        }
    }
}

struct ProcessingTaskPolicyTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)
    let policy = ProcessingTaskPolicy()
    let idle = DeviceConditions.unconstrained

    @Test func waitsForItsDateItsConditionsAndAQuietDevice() {
        let request = TaskRequest(
            identifier: "p", kind: .processing, earliestBeginDate: now.addingTimeInterval(60),
            requiresNetworkConnectivity: true,
            requiresExternalPower: true)
        #expect(
            policy.waitingReason(for: request, conditions: idle, appInForeground: nil, now: now)?.code == .taskNotYetDue
        )
        let later = now.addingTimeInterval(60)
        #expect(policy.waitingReason(for: request, conditions: idle, appInForeground: nil, now: later) == nil)
        let battery = DeviceConditions(power: .battery, batteryLevel: 90, network: .unmetered)
        #expect(
            policy.waitingReason(for: request, conditions: battery, appInForeground: nil, now: later)?.code
                == .needsExternalPower)
        let offline = DeviceConditions(power: .mains, batteryLevel: nil, network: .none)
        #expect(
            policy.waitingReason(for: request, conditions: offline, appInForeground: nil, now: later)?.code
                == .needsNetwork)
        #expect(
            policy.waitingReason(
                for: request, conditions: idle, appInForeground: AppID(rawValue: "com.example.a"), now: later)?.code
                == .appInForeground)
        #expect(policy.stopReason(for: request, conditions: battery, appInForeground: nil)?.code == .needsExternalPower)
        #expect(policy.nextCheck(for: [request], now: now) == later)
    }

    @Test func refreshRequestsOnlyWaitForTheirDate() {
        let refresh = TaskRequest(identifier: "r", kind: .appRefresh, earliestBeginDate: nil)
        let battery = DeviceConditions(power: .battery, batteryLevel: 10, network: .none)
        #expect(
            policy.waitingReason(
                for: refresh, conditions: battery, appInForeground: AppID(rawValue: "com.example.a"), now: now) == nil)
        #expect(
            policy.stopReason(for: refresh, conditions: battery, appInForeground: AppID(rawValue: "com.example.a"))
                == nil)
    }
}
