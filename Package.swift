// swift-tools-version: 6.2
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny")
]

let package = Package(
    name: "swift-background",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Background", targets: ["Background"]),
        .library(name: "BackgroundTesting", targets: ["BackgroundTesting"]),
        .executable(name: "bgd", targets: ["bgd"]),
        .executable(name: "bgd-confine", targets: ["bgd-confine"]),
        .executable(name: "bgctl", targets: ["bgctl"]),
        .executable(name: "bgrelay", targets: ["bgrelay"]),
        .executable(name: "NewsFeed", targets: ["NewsFeed"]),
        .executable(name: "ImageFetch", targets: ["ImageFetch"]),
        .executable(name: "DownloadManager", targets: ["DownloadManager"]),
        .executable(name: "PushNews", targets: ["PushNews"]),
        .executable(name: "DeliciousFood", targets: ["DeliciousFood"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        .target(name: "BackgroundModel", swiftSettings: swiftSettings),
        .target(name: "BackgroundPolicy", dependencies: ["BackgroundModel"], swiftSettings: swiftSettings),
        .target(name: "BackgroundDashboard", dependencies: ["BackgroundModel"], swiftSettings: swiftSettings),
        // Reads an APNs key file into a registration (its public half): bgctl and bgrelay both do.
        .target(
            name: "BackgroundProviderKeys",
            dependencies: [
                "BackgroundModel", .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings),
        // Threads that sleep while idle, for the processes that must (bgd, bgrelay): blocking work
        // and signals off libdispatch, whose worker-pool monitor wakes a process every second.
        .target(
            name: "QuietThreads",
            dependencies: [
                "BackgroundModel", .product(name: "GRDB", package: "GRDB.swift"), .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BackgroundStore",
            dependencies: [
                "BackgroundModel", "BackgroundPolicy", "QuietThreads", .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BackgroundTransfers",
            dependencies: [
                "BackgroundModel", "BackgroundPolicy", "BackgroundStore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The HTTP edges bgd and bgrelay both serve: the APNs provider API (TLS/HTTP/2 listener,
        // connection guard, intake) and the quiet listener plumbing under it.
        .target(
            name: "BackgroundGateway",
            dependencies: [
                "BackgroundModel", "BackgroundPolicy",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BackgroundDaemon",
            dependencies: [
                "BackgroundModel", "BackgroundPolicy", "BackgroundStore", "BackgroundTransfers", "BackgroundGateway",
                "QuietThreads",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdHTTP2", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                "BackgroundDashboard",
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The push relay: providers' APNs API in, devices' uplinks out, store-and-forward between.
        .target(
            name: "BackgroundRelay",
            dependencies: [
                "BackgroundModel", "BackgroundPolicy", "BackgroundGateway", "QuietThreads",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "Background",
            dependencies: [
                "BackgroundModel",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BackgroundTesting",
            dependencies: [
                "BackgroundModel", "BackgroundPolicy", "BackgroundStore", "BackgroundTransfers", "BackgroundDaemon",
                "BackgroundGateway", "BackgroundRelay", "Background",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "bgbench", dependencies: ["BackgroundModel", "BackgroundPolicy"], path: "Benchmarks/bgbench",
            swiftSettings: swiftSettings),
        .executableTarget(
            name: "bgbench-lifecycle", dependencies: ["Background", "BackgroundModel"],
            path: "Benchmarks/bgbench-lifecycle",
            swiftSettings: swiftSettings),
        .executableTarget(
            name: "bgbench-soak",
            dependencies: ["BackgroundDaemon", "BackgroundModel", "BackgroundStore", "BackgroundTesting"],
            path: "Benchmarks/bgbench-soak", swiftSettings: swiftSettings),
        .executableTarget(
            name: "bgbench-push",
            dependencies: [
                "Background", "BackgroundModel",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            path: "Benchmarks/bgbench-push", swiftSettings: swiftSettings),
        .executableTarget(
            name: "bgbench-relay",
            dependencies: [
                "BackgroundModel",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            path: "Benchmarks/bgbench-relay", swiftSettings: swiftSettings),
        // The floor under the relay's memory per idle uplink: TLS + HTTP/2 on SwiftNIO alone.
        .executableTarget(
            name: "bgbench-uplink-floor",
            dependencies: [
                "BackgroundGateway",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            path: "Benchmarks/bgbench-uplink-floor", swiftSettings: swiftSettings),
        // Enters Landlock and execs an app bgd launches (C: it runs before every launch).
        .executableTarget(
            name: "bgd-confine", path: "Sources/bgd-confine",
            // SwiftPM links every executable with the Swift runtime; this one is plain C and runs
            // before every app launch, so it keeps only the C library it uses.
            linkerSettings: [.unsafeFlags(["-static-executable", "-Xlinker", "--strip-all"], .when(platforms: [.linux]))]),
        .executableTarget(
            name: "bgd",
            dependencies: [
                // Built with bgd (even by `swift run bgd`), since bgd launches apps through it.
                "BackgroundDaemon", "BackgroundGateway", "BackgroundModel", "QuietThreads", "bgd-confine",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "bgrelay",
            dependencies: [
                "BackgroundRelay", "BackgroundGateway", "BackgroundModel", "BackgroundPolicy", "BackgroundProviderKeys",
                "QuietThreads",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "bgctl",
            dependencies: [
                "Background", "BackgroundModel", "BackgroundPolicy", "BackgroundProviderKeys", "QuietThreads",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "NewsFeed",
            dependencies: ["Background", "BackgroundModel"],
            path: "Examples/NewsFeed",
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "ImageFetch",
            dependencies: [
                "Background", "BackgroundModel", .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            path: "Examples/ImageFetch", swiftSettings: swiftSettings),
        .executableTarget(
            name: "PushNews",
            dependencies: [
                "Background", "BackgroundModel", .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ],
            path: "Examples/PushNews", swiftSettings: swiftSettings),
        .executableTarget(
            name: "DeliciousFood", dependencies: ["Background", "BackgroundModel"], path: "Examples/DeliciousFood",
            swiftSettings: swiftSettings),
        .executableTarget(
            name: "DownloadManager", dependencies: ["Background", "BackgroundModel"], path: "Examples/DownloadManager",
            swiftSettings: swiftSettings),
        .executableTarget(
            name: "bgd-fixture-app",
            dependencies: ["Background", .product(name: "Crypto", package: "swift-crypto")],
            path: "Tests/Fixtures/FixtureApp",
            swiftSettings: swiftSettings
        ),
        .testTarget(name: "BackgroundModelTests", dependencies: ["BackgroundModel"], swiftSettings: swiftSettings),
        .testTarget(
            name: "BackgroundTransfersTests",
            dependencies: [
                "BackgroundTransfers", "BackgroundModel",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "BackgroundTests", dependencies: ["Background", "BackgroundModel"], swiftSettings: swiftSettings),
        .testTarget(
            name: "BackgroundDashboardTests", dependencies: ["BackgroundDashboard", "BackgroundModel"],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "BackgroundPolicyTests",
            dependencies: ["BackgroundPolicy", "BackgroundModel"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BackgroundStoreTests",
            dependencies: [
                "BackgroundStore", "BackgroundModel", "BackgroundPolicy", "BackgroundTesting",
                // To read the query plans of what the store asks SQLite (EventIndexTests).
                .product(name: "GRDB", package: "GRDB.swift"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BackgroundRelayTests",
            dependencies: [
                "BackgroundRelay", "BackgroundGateway", "BackgroundModel", "BackgroundTesting",
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "GRDB", package: "GRDB.swift"),  // to read back a column no store call shows
            ],
            swiftSettings: swiftSettings),
        .testTarget(
            name: "BackgroundDaemonTests",
            dependencies: [
                "BackgroundDaemon", "BackgroundGateway", "BackgroundRelay", "BackgroundTesting", "Background",
                "BackgroundModel", "BackgroundStore", "QuietThreads", "bgrelay",
                "bgd", "bgd-confine", "bgctl", "NewsFeed", "ImageFetch", "DownloadManager", "PushNews",
                "bgd-fixture-app",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                // A transaction of the test's own beside the relay's (a push that commits late).
                .product(name: "PostgresNIO", package: "postgres-nio"),
                // A device speaking the uplink's lines on TLS by hand.
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
    ]
)
