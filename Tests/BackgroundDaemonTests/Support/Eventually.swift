/// Waits for something another process does without telling bgd (a line in its log, a process
/// state the kernel changes): yields instead of sleeping, and gives up after many tries.
func eventually(_ condition: () -> Bool) async -> Bool {
    for _ in 0..<500_000 {
        if condition() { return true }
        await Task.yield()
    }
    return condition()
}
