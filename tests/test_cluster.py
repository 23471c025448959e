"""The clustered broker (docs/SCALE.md): three real nats-server nodes, analyzers that share the
fleet's partitions and take over a dead one's, sensors over MQTT/TLS with their own
credentials. Real processes on free loopback ports, temporary state, no mocks."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
import soundfile
import soxr

from analyzer.acoustics.site import site_template
from analyzer.config import AnalyzerConfig, ClusterSettings
from analyzer.deploy.cluster import (
    ClusterLayout,
    NodeAddress,
    partition_of,
)
from analyzer.deploy.local_cluster import LocalCluster
from analyzer.deploy.services import InfluxDB, LocalDeployment
from analyzer.errors import ProvisioningError
from analyzer.ingest.cluster import ClusterAnalyzer, ClusterError
from analyzer.store.influx import InfluxClient, InfluxSettings
from sensor.config import MqttSettings
from sensor.frames import frames_from_samples
from sensor.outbox import Outbox
from sensor.publisher import FramePublisher
from sensor.wire import Frame, encode_frame
from tests.conftest import wait_until

BIN = Path(sys.executable).parent
DEMO = Path(__file__).resolve().parents[1] / "demo" / "example.flac"
RATE = 48000
PARTITIONS = 4
FRAMES = 120  # per device: the demo's first two minutes (barks in them)
PACE_S = 0.1  # between frames of one device: the run takes FRAMES * PACE_S
NODE_KILL_AT, ANALYZER_KILL_AT = 30, 70  # frames into the run
LEASE_S = 10.0  # above a JetStream leader election on a loaded 2-core machine
NS = 1_000_000_000


@pytest.fixture(scope="module")
def demo_frames() -> list[Frame]:
    """The demo recording's first FRAMES frames through the sensor's own frame code."""
    audio, rate = soundfile.read(DEMO, dtype="float64")
    audio = soxr.resample(audio, rate, RATE)[: FRAMES * RATE]
    return list(frames_from_samples(audio, RATE, 100.0, "template", 0))[:FRAMES]


def restamped(frame: Frame, device: str, start_ns: int) -> Frame:
    shift = start_ns
    times = {f.name: getattr(frame, f.name) + shift for f in dataclasses.fields(frame)
             if f.name.endswith("_start_ns")}
    return dataclasses.replace(frame, device_id=device, capture_ns=frame.capture_ns + shift,
                               **times)


class Sensor:
    """A simulated sensor: the real outbox and publisher (paho-mqtt, TLS, QoS 1, deletion
    on the analyzer's confirmation), fed finished frames instead of a microphone."""

    def __init__(self, device: str, settings: MqttSettings, root: Path) -> None:
        self.device = device
        self.outbox = Outbox(root / f"{device}.outbox")
        # A frame acknowledged by a node but not stored (the stream electing a leader after
        # the node kill) is sent again when its confirmation has not come in 2 s, then 4, 8.
        self.publisher = FramePublisher(device, settings, self.outbox, confirm_timeout_s=2.0,
                                        confirm_resend_max_s=8.0)
        self.publisher.start()

    def put(self, frame: Frame) -> None:
        self.outbox.put(frame.seq, encode_frame(frame))

    def close(self) -> None:
        self.publisher.stop()
        self.outbox.close()


class ServedWatch:
    """Samples each sensor's confirmations (a frame is confirmed once an analyzer stored it)
    every ``every_s`` on a thread of its own: :meth:`longest_unserved_s` is the longest time a
    sensor had frames waiting and none confirmed."""

    def __init__(self, sensors: list[Sensor], put: dict[str, int], every_s: float = 0.25
                 ) -> None:  # fmt: skip
        self.sensors, self.put, self.every_s = sensors, put, every_s
        self.waiting_since: dict[str, float | None] = {s.device: None for s in sensors}
        self.last_confirmed = {s.device: 0 for s in sensors}
        self.longest = {s.device: 0.0 for s in sensors}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="served-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            now = time.monotonic()
            for sensor in self.sensors:
                device, confirmed = sensor.device, sensor.publisher.confirmed
                since = self.waiting_since[device]
                if confirmed > self.last_confirmed[device] or confirmed >= self.put[device]:
                    since = None  # served: a frame stored since the last look, or none waiting
                elif since is None:
                    since = now
                self.last_confirmed[device], self.waiting_since[device] = confirmed, since
                if since is not None:
                    self.longest[device] = max(self.longest[device], now - since)

    def longest_unserved_s(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        return {device: round(gap, 1) for device, gap in self.longest.items()}


def analyzer_process(name: str, cluster: LocalCluster, influx: InfluxDB, root: Path
                     ) -> subprocess.Popen[bytes]:
    config = root / f"{name}.toml"
    config.write_text(
        f'client_id = "{name}"\nstats_interval_s = 1.0\nsites_dir = "{root / "sites"}"\n'
        # Frames the cluster lost come again from the sensors' outboxes: wait for them.
        "reorder_wait_s = 60.0\n"
        f'[influx]\nurl = "{influx.url}"\n'
        + cluster.analyzer_toml(root / "journals", lease_s=LEASE_S, ack_wait_s=10.0))
    with open(root / f"{name}.log", "ab") as log:
        return subprocess.Popen([BIN / "barkwatch", "analyzer", "run", "--config", config],
                                stdout=log, stderr=subprocess.STDOUT)


def owned(influx: InfluxClient, analyzer: str) -> set[int]:
    """Partitions whose stats point, written within the last 3 s, names ``analyzer``."""
    series = influx.query("SELECT last(frames_stored) FROM analyzer_stats WHERE time > now() - "
                          "3s GROUP BY analyzer")
    names = [s["tags"]["analyzer"] for s in series]
    return {int(n.rsplit(".p", 1)[1]) for n in names if n.startswith(analyzer + ".p")}


def event_rows(influx: InfluxClient, device: str, measurement: str = "dog_event"
               ) -> list[dict[str, Any]]:  # fmt: skip
    """Every stored field of the device's events (or another measurement's points), without
    the device tag."""
    series = influx.query(f"SELECT * FROM {measurement} WHERE device = '{device}'")
    if not series:
        return []
    columns = series[0]["columns"]
    return [{c: v for c, v in zip(columns, values, strict=True) if c != "device"}
            for values in series[0]["values"]]


def rows(influx: InfluxClient, query: str) -> list[list[Any]]:
    series = influx.query(query)
    return [list(v) for v in series[0]["values"]] if series else []


@pytest.fixture
def services(tmp_path: Path) -> Iterator[tuple[LocalDeployment, LocalCluster, InfluxDB]]:
    deployment = LocalDeployment(tmp_path / "deployment")
    cluster = LocalCluster(tmp_path / "cluster", deployment, nodes=3, partitions=PARTITIONS)
    influx = InfluxDB(tmp_path / "influxdb")
    try:
        yield deployment, cluster, influx
    finally:
        cluster.close()
        influx.stop()


def test_a_two_node_cluster_is_refused_naming_why() -> None:
    nodes = tuple(NodeAddress(f"n{i}", "127.0.0.1", 4000 + 10 * i, 4001 + 10 * i, 4002 + 10 * i)
                  for i in (1, 2))
    with pytest.raises(ProvisioningError, match="2 nodes cannot lose one"):
        ClusterLayout(nodes)


def test_two_listeners_on_one_port_are_refused() -> None:
    nodes = (NodeAddress("n1", "127.0.0.1", 4000, 4001, 4002),
             NodeAddress("n2", "127.0.0.1", 4001, 4011, 4012),
             NodeAddress("n3", "127.0.0.1", 4020, 4021, 4022))
    with pytest.raises(ProvisioningError, match="127.0.0.1:4001"):
        ClusterLayout(nodes)


def test_a_malformed_server_url_is_refused_naming_the_key() -> None:
    with pytest.raises(Exception, match="cluster.servers.*tls://host:port"):
        AnalyzerConfig(cluster=ClusterSettings(servers="tls://127.0.0.1"))


def test_an_unreachable_cluster_is_named_in_the_error(tmp_path: Path) -> None:
    from analyzer.deploy.services import free_port

    url = f"nats://127.0.0.1:{free_port()}"
    analyzer = ClusterAnalyzer(AnalyzerConfig(cluster=ClusterSettings(servers=url)))
    with pytest.raises(ClusterError, match=url.replace(".", r"\.")):
        analyzer.link.start(timeout_s=2)
    analyzer.link.close()


def test_frames_land_in_their_device_s_partition_and_a_device_cannot_publish_for_another(
    services: tuple[LocalDeployment, LocalCluster, InfluxDB],
) -> None:
    deployment, cluster, _ = services
    for device in ("dev-a", "dev-b"):
        deployment.add_device(device)
    cluster.start()
    import asyncio

    import nats

    async def stored() -> dict[str, int]:
        nc = await nats.connect(cluster.layout.client_urls(), tls=_tls(deployment),
                                user="barkwatch.analyzer",
                                password=deployment.analyzer_password_file.read_text().strip())
        js = nc.jetstream()
        for _ in range(60):
            try:
                await js.add_stream(name="BARKWATCH", subjects=["bwp.>"], num_replicas=3)
                break
            except Exception:
                await asyncio.sleep(0.5)
        await asyncio.get_running_loop().run_in_executor(None, publish)
        subscription = await js.pull_subscribe("bwp.>", durable="check")
        counts: dict[str, int] = {}
        for message in await subscription.fetch(10, timeout=10):
            counts[message.subject] = counts.get(message.subject, 0) + 1
        await nc.close()
        return counts

    def publish() -> None:
        settings = cluster.device_mqtt("dev-a", node=1)
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="dev-a",
                             protocol=mqtt.MQTTv311)
        client.tls_set(ca_certs=settings.tls_ca)
        client.username_pw_set("dev-a", settings.password())
        client.connect("127.0.0.1", settings.port)
        client.loop_start()
        for topic in ("barkwatch/v1/frames/dev-a", "barkwatch/v1/frames/dev-b",
                      "barkwatch/v1/status/dev-a"):
            client.publish(topic, b"x", qos=1).wait_for_publish(10)
        client.disconnect()
        client.loop_stop()

    counts = asyncio.run(stored())
    k = partition_of("dev-a", PARTITIONS)
    # dev-b's topic from dev-a's account is refused (acknowledged at QoS 1 under MQTT 3.1.1).
    assert counts == {f"bwp.{k}.frames.dev-a": 1, f"bwp.{k}.status.dev-a": 1}


def _tls(deployment: LocalDeployment) -> Any:
    import ssl

    return ssl.create_default_context(cafile=str(deployment.files.ca_cert))


def test_a_broker_node_and_an_analyzer_killed_mid_run_change_nothing_stored(
    services: tuple[LocalDeployment, LocalCluster, InfluxDB], tmp_path: Path,
    demo_frames: list[Frame],
) -> None:
    deployment, cluster, influx_server = services
    # Four faulted devices and four twins sending the same frames (same capture times) after
    # the faults: the uninterrupted run to compare with.
    faulted = [f"dev-{i}" for i in range(4)]
    twins = [f"twin-{i}" for i in range(4)]
    (tmp_path / "sites").mkdir()
    for device in faulted + twins:
        deployment.add_device(device)
        (tmp_path / "sites" / f"{device}.toml").write_text(
            site_template(device, source_to_sensor_m=8.0, source_to_boundary_m=12.0))
    cluster.start()
    influx_server.start()
    influx = InfluxClient(InfluxSettings(url=influx_server.url))
    influx.create_database()
    start_ns = time.time_ns() - 3600 * NS
    analyzers = {name: analyzer_process(name, cluster, influx_server, tmp_path)
                 for name in ("an-a", "an-b")}
    sensors: list[Sensor] = []
    try:
        wait_until(lambda: len(owned(influx, "an-a")) + len(owned(influx, "an-b"))
                   == PARTITIONS and owned(influx, "an-a") and owned(influx, "an-b"),
                   timeout_s=120, what="both analyzers to own partitions")
        victim = "an-a" if any(partition_of(d, PARTITIONS) in owned(influx, "an-a")
                               for d in faulted) else "an-b"
        survivor = "an-b" if victim == "an-a" else "an-a"
        sensors = [Sensor(d, cluster.device_mqtt(d, node=i % 3, fallbacks=True),
                          tmp_path / "outboxes") for i, d in enumerate(faulted)]
        put = dict.fromkeys(faulted, 0)
        watch = ServedWatch(sensors, put)
        for index, frame in enumerate(demo_frames):
            for sensor in sensors:
                sensor.put(restamped(frame, sensor.device, start_ns))
                put[sensor.device] += 1
            if index == NODE_KILL_AT:
                cluster.nodes[0].kill()  # its sensors go on through their fallback nodes
            if index == ANALYZER_KILL_AT:
                analyzers[victim].kill()
                analyzers[victim].wait(timeout=30)
            time.sleep(PACE_S)
        for sensor in sensors:  # node 0 still dead: its sensors drained through the others
            # A CI run once confirmed frames 30-119 one per resend here: copies of overdue
            # frames waited for room under max_unconfirmed, which only a confirmation freed
            # (sensor/publisher.py; test_confirmations.py's all-lost test)
            assert sensor.publisher.wait_drained(timeout_s=240), f"{sensor.device} undrained"
        unserved = watch.longest_unserved_s()
        print(f"longest unserved per device: {unserved}")
        # the bound: no device waits more than 60 s for a frame to be stored
        assert max(unserved.values()) <= 60.0, unserved
        dead_port = cluster.layout.nodes[0].mqtt_port
        moved = [s.device for s in sensors if s.publisher.client.port != dead_port]
        assert moved == faulted, "every sensor of the dead node moved to another one"
        cluster.nodes[0].start()
        # Every frame is stored already; the survivor's stats name every partition within a few
        # of its 1 s stats intervals (an instant's look failed once in CI: a partition's point
        # was older than 3 s while node 0 came back and the machine was loaded).
        wait_until(lambda: owned(influx, survivor) == set(range(PARTITIONS)), timeout_s=30,
                   what=f"{survivor}'s stats to name every partition")
        twin_sensors = [Sensor(d, cluster.device_mqtt(d, node=i % 3), tmp_path / "outboxes")
                        for i, d in enumerate(twins)]
        sensors += twin_sensors
        for frame in demo_frames:
            for sensor in twin_sensors:
                sensor.put(restamped(frame, sensor.device, start_ns))
            time.sleep(PACE_S / 4)
        for sensor in twin_sensors:
            assert sensor.publisher.wait_drained(timeout_s=240), f"{sensor.device} undrained"
        time.sleep(3 * LEASE_S)  # events close on the frames after them: all are in
    finally:
        for sensor in sensors:
            sensor.close()
        for process in analyzers.values():
            if process.poll() is None:
                process.terminate()
        for process in analyzers.values():
            process.wait(timeout=60)
    for device, twin in zip(faulted, twins, strict=True):
        seqs = rows(influx, f"SELECT seq FROM level WHERE device = '{device}'")
        assert [row[1] for row in seqs] == list(range(FRAMES)), device  # once, in order
        events = event_rows(influx, device)
        reference = event_rows(influx, twin)
        assert reference, f"{twin}: no events in the uninterrupted run"
        assert events == reference, device
        # the rules' state as they went (no finding completes in two minutes)
        progress = event_rows(influx, device, "rule_progress")
        assert progress and progress == event_rows(influx, twin, "rule_progress"), device


def test_a_lease_renewed_twice_is_kept_and_a_lease_taken_by_another_is_given_up(
    tmp_path: Path,
) -> None:
    """A renewal the server stored but whose answer was lost leaves the analyzer's revision
    behind: it checks who holds the lease and keeps it when that is itself. A lease another
    analyzer holds is given up. Leases handed back leave no key behind (a delete marker
    would read as a holder to the others)."""
    import asyncio

    from analyzer.config import load_analyzer_config
    from analyzer.ingest.cluster import OWNERS_BUCKET

    deployment = LocalDeployment(tmp_path / "deployment")
    influx_server = InfluxDB(tmp_path / "influxdb")
    cluster = LocalCluster(tmp_path / "cluster", deployment, nodes=1, partitions=2)

    async def put(key: str, value: bytes) -> None:
        await analyzer._kv.put(key, value)

    async def leases() -> list[str]:
        import nats

        nc = await nats.connect(cluster.layout.client_urls(), tls=_tls(deployment),
                                user="barkwatch.analyzer",
                                password=deployment.analyzer_password_file.read_text().strip())
        info = await nc.jetstream().stream_info(
            f"KV_{OWNERS_BUCKET}", subjects_filter=f"$KV.{OWNERS_BUCKET}.>")
        await nc.close()
        return sorted(s for s in info.state.subjects or {} if ".member." not in s)

    try:
        cluster.start()
        influx_server.start()
        config_path = tmp_path / "an.toml"
        config_path.write_text(f'client_id = "an-x"\n[influx]\nurl = "{influx_server.url}"\n'
                               + cluster.analyzer_toml(lease_s=30.0))  # an-y's outlives the test
        analyzer = ClusterAnalyzer(load_analyzer_config(str(config_path)))
        analyzer.start()
        try:
            wait_until(lambda: analyzer.owned == [0, 1], timeout_s=60,
                       what="the analyzer to own both partitions")
            analyzer.link.call(put("p0", b"an-x"), 10)  # as a renewal whose answer was lost
            analyzer.link.call(put("p1", b"an-y"), 10)  # another analyzer holds it now
            wait_until(lambda: analyzer.owned == [0], timeout_s=30,
                       what="partition 1 given up")
            time.sleep(3.0)  # three renewals more
            assert analyzer.owned == [0]
        finally:
            analyzer.stop()
        # p0 handed back at stop, p1 still an-y's
        assert asyncio.run(leases()) == [f"$KV.{OWNERS_BUCKET}.p1"]
    finally:
        cluster.close()
        influx_server.stop()


def test_a_refused_confirmation_subscription_is_asked_for_again_until_granted(
    tmp_path: Path, demo_frames: list[Frame],
) -> None:
    """nats-server refuses an MQTT QoS 1 subscription it cannot make a consumer for (a CI run:
    "Unable to add JetStream consumer for subscription" while the node kill's leader election
    went on); a sensor that did not notice never heard a confirmation and sent its 120 frames
    again every 8 s until the test gave up. Here the refusal is a missing permission, granted
    again by a reload: the sensor asks again and its frame is confirmed and deleted."""
    import asyncio

    import nats

    from sensor.confirmations import encode_stored

    deployment = LocalDeployment(tmp_path / "deployment")
    cluster = LocalCluster(tmp_path / "cluster", deployment, nodes=1, partitions=2)
    deployment.add_device("dev-a")
    cluster.render()
    config = cluster.nodes[0].config_path
    granted = '"barkwatch.cmd.v1.dev-a.>"'
    assert granted in config.read_text()
    config.write_text(config.read_text().replace(granted, '"barkwatch.cmd.v1.nobody.>"'))
    outbox = Outbox(tmp_path / "dev-a.outbox")
    publisher = FramePublisher("dev-a", cluster.device_mqtt("dev-a", node=0), outbox,
                               confirm_timeout_s=60.0)

    async def confirm() -> None:  # what the analyzer sends once the frame is stored
        nc = await nats.connect(cluster.layout.client_urls(), tls=_tls(deployment),
                                user="barkwatch.analyzer",
                                password=deployment.analyzer_password_file.read_text().strip())
        for payload in encode_stored([0]):
            await nc.publish("barkwatch.cmd.v1.dev-a.stored", payload)
        await nc.flush()
        await nc.close()

    try:
        cluster.nodes[0].start()
        publisher.start()
        outbox.put(0, encode_frame(restamped(demo_frames[0], "dev-a", time.time_ns())))
        wait_until(lambda: publisher.subscribe_refusals >= 2, timeout_s=60,
                   what="the refusal, asked again once")
        assert not publisher.confirmations_subscribed
        cluster.render()  # the permission back
        cluster.nodes[0].reload()
        wait_until(lambda: publisher.confirmations_subscribed, timeout_s=60,
                   what="the subscription granted")
        asyncio.run(confirm())
        assert publisher.wait_drained(timeout_s=30), "the confirmed frame is still waiting"
    finally:
        publisher.stop()
        outbox.close()
        cluster.close()


def test_cluster_render_of_two_nodes_exits_1_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from analyzer.cli.main import main

    nodes = ["--node", "n1=127.0.0.1:4000:4001:4002", "--node", "n2=127.0.0.1:4010:4011:4012"]
    assert main(["cluster", "render", "--broker-dir", str(tmp_path), *nodes,
                 "--out", str(tmp_path / "conf")]) == 1
    assert "2 nodes cannot lose one" in capsys.readouterr().err
