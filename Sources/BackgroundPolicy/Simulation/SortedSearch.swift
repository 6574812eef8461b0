/// Binary search in an array sorted ascending: schedules and open histories hold thousands of
/// times, and the replays ask of them hundreds of thousands of times.
extension Array where Element: Comparable {
    /// The index of the first element not before `value` (`count` when there is none).
    func firstIndex(notBefore value: Element) -> Int {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if self[middle] < value { low = middle + 1 } else { high = middle }
        }
        return low
    }

    /// The first element not before `value`.
    func first(notBefore value: Element) -> Element? {
        let index = firstIndex(notBefore: value)
        return index < count ? self[index] : nil
    }

    /// The last element not after `value`.
    func last(notAfter value: Element) -> Element? {
        var low = 0
        var high = count
        while low < high {
            let middle = (low + high) / 2
            if self[middle] <= value { low = middle + 1 } else { high = middle }
        }
        return low == 0 ? nil : self[low - 1]
    }

    /// How many elements are not before `value`.
    func count(notBefore value: Element) -> Int { count - firstIndex(notBefore: value) }

    /// How many elements come before `value`.
    func count(before value: Element) -> Int { firstIndex(notBefore: value) }
}
