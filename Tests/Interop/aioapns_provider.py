"""A provider written with an off-the-shelf APNs client library (aioapns, from PyPI), pointed at
bgd's gateway: only the host, the port and the trusted certificate differ from talking to Apple.

Usage: aioapns_provider.py HOST PORT CERT KEY.p8 KEY_ID TEAM_ID TOPIC DEVICE_TOKEN CONTENT_ID
Prints one line per push: `<name> <ok|reason>`.
"""
import asyncio
import logging
import ssl
import sys

from aioapns import APNs, NotificationRequest, PushType
from aioapns import connection


class OneTokenPerKey(connection.JWTAuthorizationHeaderProvider):
    """aioapns makes a new provider token for every connection; a connection lost under load
    then reconnects with a new `iat` inside 20 minutes, which APNs (and bgd) refuse with
    TooManyProviderTokenUpdates. One token per key, reused as Apple asks, keeps this test about
    bgd's gateway and not about the library's token hygiene."""

    shared = {}

    def get_header(self):
        key = (self.key_id, self.team_id)
        if key not in OneTokenPerKey.shared:
            OneTokenPerKey.shared[key] = super().get_header()
        return OneTokenPerKey.shared[key]


async def main() -> None:
    host, port, cert, key_file, key_id, team_id, topic, token, content_id = sys.argv[1:10]
    # Whatever the library warns of (a lost connection, a retry) goes to stderr for the test's log.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    connection.JWTAuthorizationHeaderProvider = OneTokenPerKey
    # The only change from production: where the gateway is, and which certificate to trust.
    for protocol in (connection.APNsProductionClientProtocol, connection.APNsDevelopmentClientProtocol):
        protocol.APNS_SERVER = host
        protocol.APNS_PORT = int(port)
    context = ssl.create_default_context(cafile=cert)
    with open(key_file) as handle:
        key = handle.read()
    client = APNs(key=key, key_id=key_id, team_id=team_id, topic=topic, use_sandbox=False, ssl_context=context)
    pushes = [
        ("background", NotificationRequest(
            device_token=token, message={"aps": {"content-available": 1}, "content-id": int(content_id)},
            priority=5, push_type=PushType.BACKGROUND)),
        ("priority10", NotificationRequest(
            device_token=token, message={"aps": {"content-available": 1}}, priority=10, push_type=PushType.BACKGROUND)),
        ("unknownToken", NotificationRequest(
            device_token="0" * 64, message={"aps": {"content-available": 1}}, priority=5, push_type=PushType.BACKGROUND)),
    ]
    for name, request in pushes:
        result = await client.send_notification(request)
        print(name, "ok" if result.is_successful else result.description, flush=True)


asyncio.run(main())
