/// Waits for something another process does without telling bgd (a line in its log, a process
/// state the kernel changes): yields instead of sleeping, and gives up after many tries.
func eventually(_ condition: () -> Bool) async -> Bool {
    for _ in 0..<500_000 {
        if condition() { return true }
        await Task.yield()
    }
    return condition()
}

/// The same for a condition that must be awaited (another process's database, bgd's API).
func eventuallyAsync(_ condition: () async throws -> Bool) async rethrows -> Bool {
    for _ in 0..<200_000 {
        if try await condition() { return true }
        await Task.yield()
    }
    return try await condition()
}
