// Apps write `import Background` and get the shared vocabulary (AppID, FetchInterval,
// BackgroundFetchResult, …) with it, as `import UIKit` brings Foundation's types.
@_exported import BackgroundModel
