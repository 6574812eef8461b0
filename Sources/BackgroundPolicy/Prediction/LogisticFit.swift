import Foundation

/// Fits a logistic regression to weighted examples by Newton's method: the exact optimum of the
/// L2-penalised log-loss, where a single pass of stochastic gradient steps stays far from it.
///
/// Examples come as rows of a flat array (`width` values each, the first being the constant 1
/// for the bias), a label of 0 or 1 and a weight. The fit starts from `start` (yesterday's
/// weights: a day's new examples move them little, so two or three steps converge) and backs
/// off any step that does not lower the loss (a full Newton step can overshoot when a feature
/// nearly separates the examples, and the weights would run away).
struct LogisticFit {
    var width: Int
    var rows: [Double]
    var labels: [Double]
    var weights: [Double]
    /// L2 penalty on every weight but the bias.
    var ridge: Double

    init(width: Int, ridge: Double) {
        self.width = width
        self.ridge = ridge
        rows = []
        labels = []
        weights = []
    }

    /// Adds an example whose row `fill` writes into the `width` values it is given (zeroed).
    mutating func append(label: Double, weight: Double, fill: (inout ArraySlice<Double>) -> Void) {
        let start = rows.count
        rows.append(contentsOf: repeatElement(0, count: width))
        fill(&rows[start..<(start + width)])
        labels.append(label)
        weights.append(weight)
    }

    mutating func reserve(_ examples: Int) {
        rows.reserveCapacity(examples * width)
        labels.reserveCapacity(examples)
        weights.reserveCapacity(examples)
    }

    var count: Int { labels.count }

    /// The penalised loss at `w`.
    func loss(_ w: [Double]) -> Double {
        var total = 0.0
        rows.withUnsafeBufferPointer { rows in
            for i in 0..<count {
                let z = Self.dot(w, rows, i * width)
                // log(1 + eᶻ) − y·z, without overflow
                let softplus = z > 0 ? z + log1p(exp(-z)) : log1p(exp(z))
                total += weights[i] * (softplus - labels[i] * z)
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

    private static func dot(_ w: [Double], _ rows: UnsafeBufferPointer<Double>, _ base: Int) -> Double {
        var z = 0.0
        for j in w.indices { z += w[j] * rows[base + j] }
        return z
    }

    /// H⁻¹·g at `w`: the gradient and Hessian of the loss, solved.
    private func newtonStep(at w: [Double]) -> [Double]? {
        let n = width
        var gradient = [Double](repeating: 0, count: n)
        var hessian = [Double](repeating: 0, count: n * n)
        rows.withUnsafeBufferPointer { rows in
            gradient.withUnsafeMutableBufferPointer { gradient in
                hessian.withUnsafeMutableBufferPointer { hessian in
                    for i in 0..<count {
                        let base = i * n
                        let p = 1 / (1 + exp(-Self.dot(w, rows, base)))
                        let e = weights[i] * (p - labels[i])
                        let v = weights[i] * max(p * (1 - p), 1e-9)
                        for j in 0..<n {
                            let rj = rows[base + j]
                            gradient[j] += e * rj
                            let vr = v * rj
                            for k in j..<n { hessian[j * n + k] += vr * rows[base + k] }
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
        return Self.solveLinear(hessian, gradient, n)
    }

    /// x with a·x = b (a is n×n, row-major), by Gaussian elimination with partial pivoting; nil
    /// when a is singular.
    static func solveLinear(_ a: [Double], _ b: [Double], _ n: Int) -> [Double]? {
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
}
