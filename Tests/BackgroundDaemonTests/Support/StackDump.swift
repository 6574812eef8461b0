import Foundation

/// Every thread's stack of a running process (gdb in batch mode), for a test that finds a
/// process hung: what each thread waits on is what the failure message needs. Says why when
/// gdb is not there or cannot attach.
func stackDump(of pid: Int32) async -> String {
    guard FileManager.default.isExecutableFile(atPath: "/usr/bin/gdb") else { return "(no /usr/bin/gdb for a stack dump)" }
    let output = try? await Command.run(
        "/usr/bin/gdb", ["-p", String(pid), "-batch", "-nx", "-ex", "set pagination off", "-ex", "thread apply all bt 30"])
    guard let output else { return "(gdb did not run)" }
    // Only the stacks: gdb's banner and symbol-loading chatter say nothing here.
    return output.standardOutput.split(separator: "\n", omittingEmptySubsequences: false)
        .filter { $0.hasPrefix("#") || $0.hasPrefix("Thread ") }.joined(separator: "\n")
}
