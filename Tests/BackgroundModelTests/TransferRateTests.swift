import BackgroundModel
import Testing

struct TransferRateTests {
    @Test func rateIsBytesOverTheSamplesSpan() {
        var rate = TransferRate()
        #expect(rate.bytesPerSecond == 0)
        rate.record(0, at: .seconds(10))
        #expect(rate.bytesPerSecond == 0, "one sample says nothing yet")
        rate.record(1_000, at: .milliseconds(10_500))
        rate.record(3_000, at: .seconds(11))
        #expect(rate.bytesPerSecond == 3_000)
    }

    /// bgd restarted the download from zero (the server would not resume it): the count falls,
    /// and the rate must not go negative for the next few samples.
    @Test func aCountThatFallsStartsTheSamplesAgain() {
        var rate = TransferRate()
        rate.record(50_000, at: .seconds(1))
        rate.record(60_000, at: .seconds(2))
        rate.record(0, at: .seconds(3))
        #expect(rate.bytesPerSecond == 0)
        rate.record(2_000, at: .seconds(4))
        #expect(rate.bytesPerSecond == 2_000)
    }

    @Test func theRateFollowsTheLastFewSamples() {
        var rate = TransferRate()
        for second in 0..<10 { rate.record(Int64(second) * 100, at: .seconds(second)) }
        for second in 10..<(10 + TransferRate.window) {
            rate.record(900 + Int64(second - 9) * 1_000, at: .seconds(second))
        }
        #expect(rate.bytesPerSecond == 1_000, "the slow start is forgotten")
    }
}
