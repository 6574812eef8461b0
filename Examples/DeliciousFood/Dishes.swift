import Foundation

/// Seed 002's table data: the dishes on the list, newest first, and which the user has not seen.
struct Menu: Codable, Sendable {
    var dishes: [String] = []
    /// How many of the first `dishes` arrived since the user last looked (shown highlighted).
    var unseen = 0

    /// The seed's `possibleTableData`.
    static let possibleDishes = [
        "Spicy garlic venison bread", "Apple Crisp II", "Eggplant Parmesan II", "Pumpkin Ginger Cupcakes",
        "Easy Lasagna",
        "Puttanesca", "Alfredo Sauce",
    ]

    /// `insertNewObject`: 0 to 4 random dishes at the top; returns how many.
    mutating func insertNewDishes<G: RandomNumberGenerator>(using generator: inout G) -> Int {
        let count = Int.random(in: 0...4, using: &generator)
        for _ in 0..<count { dishes.insert(Self.possibleDishes.randomElement(using: &generator)!, at: 0) }
        unseen += count
        return count
    }

    /// The list as the table view shows it: new rows highlighted.
    func rendered() -> String {
        guard !dishes.isEmpty else { return "Delicious Food\n  (no dishes yet: refresh)" }
        let rows = dishes.enumerated().map { index, dish in index < unseen ? "  * \(dish)   ← new" : "    \(dish)" }
        return (["Delicious Food"] + rows).joined(separator: "\n")
    }
}

/// The list on disk, in the app's container: what a background fetch adds, the foreground reads.
struct MenuFile: Sendable {
    let path: String

    func load() -> Menu {
        guard let data = FileManager.default.contents(atPath: path),
            let menu = try? JSONDecoder().decode(Menu.self, from: data)
        else { return Menu() }
        return menu
    }

    func save(_ menu: Menu) throws {
        try JSONEncoder().encode(menu).write(to: URL(fileURLWithPath: path), options: .atomic)
    }
}
