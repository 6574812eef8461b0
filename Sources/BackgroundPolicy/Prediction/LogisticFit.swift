import Foundation

/// Labelled, weighted examples as a logistic fit reads them: each one's row is written on
/// demand into a buffer of `width` values (the first being the constant 1 for the bias), so a
/// month of examples is never held twice — the rows would be several megabytes, made once a day.
protocol LogisticExamples {
    var count: Int { get }
    /// Values per row, the bias's 1 included.
    var width: Int { get }
    func label(_ i: Int) -> Double
    func weight(_ i: Int) -> Double
    func fill(_ i: Int, into row: UnsafeMutableBufferPointer<Double>)
}

/// Examples held as rows in a flat array (for small fits and tests).
struct ExampleRows: LogisticExamples {
    let width: Int
    private var rows: [Double] = []
    private var labels: [Double] = []
    private var weights: [Double] = []

    init(width: Int) { self.width = width }

    var count: Int { labels.count }
    func label(_ i: Int) -> Double { labels[i] }
    func weight(_ i: Int) -> Double { weights[i] }
    func fill(_ i: Int, into row: UnsafeMutableBufferPointer<Double>) {
        for j in 0..<width { row[j] = rows[i * width + j] }
    }

    mutating func append(_ row: [Double], label: Double, weight: Double) {
        precondition(row.count == width)
        rows += row
        labels.append(label)
        weights.append(weight)
    }
}

/// Fits a logistic regression to weighted examples by Newton's method: the exact optimum of the
/// L2-penalised log-loss, where a single pass of stochastic gradient steps stays far from it.
///
/// The fit starts from `start` (yesterday's weights: a day's new examples move them little, so
/// two or three steps converge) and backs off any step that does not lower the loss (a full
/// Newton step can overshoot when a feature nearly separates the examples, and the weights would
/// run away).
struct LogisticFit<Examples: LogisticExamples> {
    let examples: Examples
    /// L2 penalty on every weight but the bias.
    let ridge: Double

    init(_ examples: Examples, ridge: Double) {
        self.examples = examples
        self.ridge = ridge
    }

    var width: Int { examples.width }

    /// Calls `body` with each example's index and row.
    private func forEachRow(_ body: (Int, UnsafeMutableBufferPointer<Double>) -> Void) {
        withUnsafeTemporaryAllocation(of: Double.self, capacity: width) { row in
            for i in 0..<examples.count {
                examples.fill(i, into: row)
                body(i, row)
            }
        }
    }

    /// The penalised loss at `w`.
    func loss(_ w: [Double]) -> Double {
        var total = 0.0
        w.withUnsafeBufferPointer { w in
            forEachRow { i, row in
                let z = Self.dot(w, row)
                // log(1 + eᶻ) − y·z, without overflow
                let softplus = z > 0 ? z + log1p(exp(-z)) : log1p(exp(z))
                total += examples.weight(i) * (softplus - examples.label(i) * z)
            }
        }
        for j in 1..<width { total += 0.5 * ridge * w[j] * w[j] }
        return total
    }

    /// The weights minimising the loss, from `start`; `start` itself when the examples cannot
    /// move it (none, or a singular system).
    func solve(from start: [Double], iterations: Int = 10) -> [Double] {
        var w = start
        var current = loss(w)
        guard current.isFinite else { return start }
        for _ in 0..<iterations {
            guard let step = newtonStep(at: w) else { break }
            var scale = 1.0
            var improved = false
            while scale > 1e-3 {
                let trial = zip(w, step).map { $0 - scale * $1 }
                let value = loss(trial)
                if value.isFinite, value <= current {
                    improved = current - value > 1e-7 * max(1, abs(current))
                    w = trial
                    current = value
                    break
                }
                scale /= 2
            }
            if !improved { break }
        }
        return w
    }

    private static func dot(_ w: UnsafeBufferPointer<Double>, _ row: UnsafeMutableBufferPointer<Double>) -> Double {
        var z = 0.0
        for j in 0..<w.count { z += w[j] * row[j] }
        return z
    }

    /// H⁻¹·g at `w`: the gradient and Hessian of the loss, solved.
    private func newtonStep(at w: [Double]) -> [Double]? {
        let n = width
        var gradient = [Double](repeating: 0, count: n)
        var hessian = [Double](repeating: 0, count: n * n)
        gradient.withUnsafeMutableBufferPointer { gradient in
            hessian.withUnsafeMutableBufferPointer { hessian in
                w.withUnsafeBufferPointer { w in
                    forEachRow { i, row in
                        let p = 1 / (1 + exp(-Self.dot(w, row)))
                        let weight = examples.weight(i)
                        let e = weight * (p - examples.label(i))
                        let v = weight * max(p * (1 - p), 1e-9)
                        for j in 0..<n {
                            let rj = row[j]
                            gradient[j] += e * rj
                            let vr = v * rj
                            for k in j..<n { hessian[j * n + k] += vr * row[k] }
                        }
                    }
                }
            }
        }
        for j in 1..<n {
            gradient[j] += ridge * w[j]
            hessian[j * n + j] += ridge
        }
        for j in 0..<n { for k in 0..<j { hessian[j * n + k] = hessian[k * n + j] } }
        return solveLinearSystem(hessian, gradient, n)
    }
}

/// x with a·x = b (a is n×n, row-major), by Gaussian elimination with partial pivoting; nil
/// when a is singular.
func solveLinearSystem(_ a: [Double], _ b: [Double], _ n: Int) -> [Double]? {
    var m = a
    var r = b
    for c in 0..<n {
        var pivot = c
        for i in (c + 1)..<n where abs(m[i * n + c]) > abs(m[pivot * n + c]) { pivot = i }
        guard abs(m[pivot * n + c]) > 1e-12 else { return nil }
        if pivot != c {
            for k in 0..<n { m.swapAt(c * n + k, pivot * n + k) }
            r.swapAt(c, pivot)
        }
        for i in (c + 1)..<n {
            let f = m[i * n + c] / m[c * n + c]
            if f == 0 { continue }
            for k in c..<n { m[i * n + k] -= f * m[c * n + k] }
            r[i] -= f * r[c]
        }
    }
    var x = [Double](repeating: 0, count: n)
    for i in stride(from: n - 1, through: 0, by: -1) {
        var s = r[i]
        for k in (i + 1)..<n { s -= m[i * n + k] * x[k] }
        x[i] = s / m[i * n + i]
    }
    return x
}
