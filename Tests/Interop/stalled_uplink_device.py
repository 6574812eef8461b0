"""A relay device on the HTTP/2 uplink that stops reading, for
PushRelayTests.anHTTP2UplinkWhoseDeviceReadsNothingIsCut.

It opens POST /v1/uplink with its bearer, sends 600 lines that are not frames (each answered
with a refusal of ~130 bytes, ~78 KB in all), and then grants the relay no flow-control window:
it keeps reading the socket (so pings and settings are answered and a reset is seen) but never
acknowledges the data, so the relay's writes on the stream wait. Prints "ready" once the relay's
first bytes arrived, "stalled" once the relay has used the whole initial window (65,535 bytes)
and so waits to write the rest, and "closed" when the relay closes the connection (the cut: a
reset of the stream alone would queue behind what a device that reads nothing never takes).
"reset" (then it exits) or "ended" would mean the relay only reset or ended the stream.

Usage: python stalled_uplink_device.py HOST PORT CA_FILE "Bearer DEVICE.SECRET"
"""
import socket
import ssl
import sys

import h2.config
import h2.connection
import h2.events

host, port, ca_file, bearer = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
context = ssl.create_default_context(cafile=ca_file)
context.set_alpn_protocols(["h2"])
sock = context.wrap_socket(socket.create_connection((host, port)), server_hostname="localhost")
connection = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
connection.initiate_connection()
connection.send_headers(1, [
    (":method", "POST"), (":path", "/v1/uplink"), (":scheme", "https"), (":authority", f"localhost:{port}"),
    ("authorization", bearer), ("content-type", "application/x-ndjson"),
])
for _ in range(6):  # frames of at most 16 KB
    connection.send_data(1, (b"x" * 100 + b"\n") * 100)
sock.sendall(connection.data_to_send())

received = 0
while True:
    data = sock.recv(65536)
    if not data:
        print("closed", flush=True)
        break
    for event in connection.receive_data(data):
        if isinstance(event, h2.events.DataReceived):
            if received == 0:
                print("ready", flush=True)
            received += event.flow_controlled_length
            if received >= 65535 > received - event.flow_controlled_length:
                # The whole initial window: the relay has more to write, and must wait.
                print("stalled", flush=True)
        elif isinstance(event, h2.events.StreamReset):
            print("reset", flush=True)
            sys.exit(0)
        elif isinstance(event, h2.events.StreamEnded):
            print("ended", flush=True)
    sock.sendall(connection.data_to_send())
