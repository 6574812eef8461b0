/// The token of an `Authorization: Bearer <token>` header. The scheme's name is matched without
/// regard to case (RFC 9110 §11.1): a client sending `bearer <token>` was refused as unauthorized.
public enum BearerToken {
    /// The token, without the white space around it; nil for another scheme or none.
    public static func of(_ header: String?) -> String? {
        guard let header, header.utf8.count > 7, header.prefix(7).lowercased() == "bearer " else { return nil }
        return String(header.dropFirst(7)).trimmingCharacters(in: .whitespaces)
    }
}
