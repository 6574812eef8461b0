import BackgroundModel
import BackgroundPolicy
import Foundation
import HTTPTypes
import Synchronization

/// Who may enroll a device with this node (`POST /v1/devices`): anyone by default, for a relay
/// on a private network; with an enrollment token set, only a client that presents it (a relay
/// on the internet). Either way enrollments are rate-limited per node, so a flood of them costs
/// the database little: each one is a row that stays.
public struct EnrollmentPolicy: Sendable {
    /// What a device must send as `Authorization: Bearer <token>` to enroll (nil: no token).
    public var token: String?
    /// Enrollments a second this node takes, with bursts; 429 beyond.
    public var limit: PushFloodLimit

    public init(token: String? = nil, limit: PushFloodLimit = PushFloodLimit(perSecond: 10, burst: 100)) {
        self.token = token
        self.limit = limit
    }
}

/// Applies an `EnrollmentPolicy` to each request.
final class EnrollmentGate: Sendable {
    struct Refusal: Error, Equatable {
        var status: HTTPResponse.Status
        var code: String
        var reason: String
    }

    private let policy: EnrollmentPolicy
    private let allowance = Mutex<PushThrottle.Allowance?>(nil)

    init(_ policy: EnrollmentPolicy) { self.policy = policy }

    /// Nil if the request may enroll a device now; why not otherwise. A refused request does not
    /// count against the rate, so a client that was refused a token cannot starve the others.
    func check(authorization: String?, now: Date) -> Refusal? {
        if let token = policy.token {
            let given = BearerToken.of(authorization) ?? ""
            guard !given.isEmpty else {
                return Refusal(
                    status: .unauthorized, code: "enrollmentTokenRequired",
                    reason:
                        "this relay enrolls only devices that present its enrollment token: bgctl push relay enroll URL --enrollment-token TOKEN (or bgd --push-relay-enrollment-token)"
                )
            }
            guard SQLiteRelayStore.sameHash(SQLiteRelayStore.hash(given), SQLiteRelayStore.hash(token)) else {
                return Refusal(
                    status: .unauthorized, code: "enrollmentTokenInvalid",
                    reason:
                        "the enrollment token is not this relay's (the one its operator started bgrelay with, --enrollment-token)"
                )
            }
        }
        let admitted = allowance.withLock { allowance in
            let answer = policy.limit.admit(allowance, now: now)
            allowance = answer.allowance
            return answer.admitted
        }
        guard admitted else {
            return Refusal(
                status: .tooManyRequests, code: "tooManyEnrollments",
                reason: "this relay node is enrolling too many devices at once; try again in a few seconds")
        }
        return nil
    }
}
