import Foundation

/// Seed 000's `NewsItem`: a date and a text.
struct NewsItem: Codable, Equatable {
    var date: Date
    var text: String
}

/// The app's list, kept in a JSON file in the app's own directory. Writes go to a temporary
/// file renamed into place, so a process killed mid-write never leaves a torn list.
struct NewsStore {
    let url: URL

    func load() -> [NewsItem] {
        guard let data = try? Data(contentsOf: url),
            let items = try? JSONDecoder.news.decode([NewsItem].self, from: data)
        else {
            // First run: "pre-populate the array with one item", as the seed does.
            return [NewsItem(date: .now, text: "News text 1")]
        }
        return items
    }

    func save(_ items: [NewsItem]) throws {
        let data = try JSONEncoder.news.encode(items)
        let temporary = url.appendingPathExtension("tmp")
        try data.write(to: temporary)
        guard rename(temporary.path, url.path) == 0 else { throw CocoaError(.fileWriteUnknown) }
    }
}

extension JSONEncoder {
    static var news: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return encoder
    }
}

extension JSONDecoder {
    static var news: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return decoder
    }
}
