"""``voicespec serve --ray``: the WebSocket server as a Ray Serve application.

Each replica (:class:`VoiceReplica`) runs a whole :class:`~voicespec.serve.server.TTSServer` — a
voice, the batched engine, protocol 1.1 — on a port of its node. The ingress (:class:`Ingress`, a
FastAPI deployment behind Serve's HTTP proxy) takes each client's WebSocket, asks Serve for a
replica and relays the socket both ways, message for message: the protocol is the plain server's.
A session *is* a request to Serve (a streaming call held open for the socket's life), so Serve's
router (the less loaded of two replicas) and its autoscaler (``target_ongoing_requests``) both
count active sessions, and a session stays on its replica. A replica that dies ends the sockets
it held with ``error`` ``replica_lost`` (fatal) and close 1011; clients reconnect, the other
replicas go on. ``/healthz`` and ``/metrics`` add up every replica's (labelled ``replica``).
"""


import asyncio
import json
import logging
from dataclasses import dataclass, replace

from fastapi import FastAPI, Request, WebSocket  # real annotations below: FastAPI reads them (no __future__ import)
from fastapi.responses import Response
from ray import serve
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from voicespec.serve import protocol as P
from voicespec.serve.config import ServerConfig

log = logging.getLogger("ray.serve")
REGISTRY = "voicespec-replicas"  # the named actor where replicas say where they listen


@dataclass(frozen=True)
class RayServeConfig:
    replicas: int = 2  # at start; autoscaled between min and max on active sessions
    min_replicas: int = 1
    max_replicas: int = 2
    sessions_per_replica: int = 8  # the autoscaler's target of active sessions per replica
    replica_cpus: float = 1.0
    replica_gpus: float = 0.0  # > 0 on GPU nodes: Ray hides every GPU from an actor that asks for none
    port: int = 8000  # Serve's HTTP proxy: the one address clients use
    drain_s: float = 300.0  # a replica being scaled down keeps its sessions this long before it is stopped


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Registry:
    """Where each live replica listens (replica id → base URL): what /healthz and /metrics ask."""

    def __init__(self) -> None:
        self.urls: dict[str, str] = {}

    def add(self, replica: str, url: str) -> None:
        self.urls[replica] = url

    def remove(self, replica: str) -> None:
        self.urls.pop(replica, None)

    def all(self) -> dict[str, str]:
        return dict(self.urls)


class VoiceReplica:
    """One voice server on this node's address, on a port of its own."""

    async def __init__(self, config: ServerConfig, registry) -> None:
        import ray

        from voicespec.serve.server import TTSServer

        host = ray.util.get_node_ip_address()  # where the ingress, on whichever node, reaches this replica
        self.server = TTSServer(replace(config, host=host, port=0))  # relayed sockets carry no Origin: the ingress checks it
        await self.server.start()
        self.base = f"http://{host}:{self.server.port}"
        self.id = serve.get_replica_context().replica_tag
        self.registry = registry
        await registry.add.remote(self.id, self.base)

    async def session(self):
        """A relayed socket's ticket: where to connect; held open (an ongoing request) until the
        ingress cancels it when the socket ends."""
        yield self.base.replace("http://", "ws://") + P.WS_PATH
        await asyncio.Event().wait()

    async def __del__(self) -> None:
        await self.registry.remove.remote(self.id)
        await self.server.stop()


app = FastAPI()  # the ingress's routes (Serve's documented pattern: the app at module level)


@serve.deployment
@serve.ingress(app)
class VoiceIngress:
    """Clients' one address: WebSockets relayed to replicas, HTTP pages from any replica.
    (``serve.deployment`` pickles the class as it is defined: what its methods use is defined above
    it or imported where it runs.)"""

    def __init__(self, replicas, registry, allowed_origins: tuple[str, ...] = ()) -> None:
        self.replicas, self.registry, self.allowed_origins = replicas, registry, allowed_origins

    @app.websocket(P.WS_PATH)
    async def stream(self, ws: WebSocket) -> None:
        ticket = self.replicas.session.options(stream=True).remote()
        try:
            await self._stream(ws, ticket)
        except Exception:
            log.exception("relaying a session failed")
            raise

    async def _stream(self, ws: WebSocket, ticket) -> None:
        from voicespec.cluster.relay import deny, relay
        from voicespec.serve.http import origin_ok

        try:
            if not origin_ok(ws, self.allowed_origins):  # as the plain server decides, on the client's own headers
                await deny(ws, 403, "forbidden_origin", f"origin {ws.headers.get('origin')!r} is not allowed")
                return
            url = await ticket.__anext__()
            query = ws.url.query
            headers = {k: v for k, v in ws.headers.items() if k.lower() == "authorization"}
            try:
                upstream = await connect(url + (f"?{query}" if query else ""), additional_headers=headers,
                                         max_size=None, compression=None, ping_interval=None)
            except InvalidStatus as e:  # the replica refused the handshake (the key): so does the ingress
                await deny(ws, e.response.status_code, None, e.response.body)
                return
            try:
                await ws.accept()
                await relay(ws, upstream)
            finally:
                await upstream.close()
        finally:
            ticket.cancel()

    @app.get("/{path:path}")
    async def page(self, request: Request) -> Response:
        """Any other GET: the same page of some live replica (the player, /v1/voices, /protocol)."""
        from voicespec.cluster.relay import fetch

        if request.url.path == "/healthz":
            return await self.healthz()
        if request.url.path == "/metrics":
            return await self.metrics(request)
        urls = list((await self.registry.all.remote()).values())
        path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        for base in urls:
            got = await fetch(base + path, dict(request.headers))
            if got is not None:
                return Response(got[2], got[0], media_type=got[1])
        return Response(json.dumps({"error": "unavailable", "message": "no replica is up"}), 503,
                        media_type="application/json")

    async def healthz(self) -> Response:
        from voicespec.cluster.relay import fetch

        replicas = {}
        for rid, base in (await self.registry.all.remote()).items():
            got = await fetch(base + "/healthz", {})
            replicas[rid] = json.loads(got[2]) if got and got[0] == 200 else {"ok": False}
        up = [r for r in replicas.values() if r.get("ok")]
        body = {"ok": bool(up), "replicas": replicas, "sessions": sum(r["sessions"] for r in up),
                "max_sessions": sum(r["max_sessions"] for r in up), "protocol": P.VERSION,
                "protocol_version": P.PROTOCOL_VERSION}
        return Response(json.dumps(body), 200 if up else 503, media_type="application/json")

    async def metrics(self, request: Request) -> Response:
        from voicespec.cluster.relay import fetch, merge_metrics

        texts = {}
        for rid, base in (await self.registry.all.remote()).items():
            got = await fetch(base + "/metrics", dict(request.headers))
            if got is not None and got[0] != 200:
                return Response(got[2], got[0], media_type=got[1])
            if got is not None:
                texts[rid] = got[2].decode()
        return Response(merge_metrics(texts), 200, media_type="text/plain; version=0.0.4")


def build_app(config: ServerConfig, ray_config: RayServeConfig):
    """The Serve application: a registry, the voice replicas, the ingress."""
    registry = Registry.bind()
    replica = serve.deployment(
        VoiceReplica, ray_actor_options={"num_cpus": ray_config.replica_cpus, "num_gpus": ray_config.replica_gpus},
        max_ongoing_requests=config.max_sessions, graceful_shutdown_timeout_s=ray_config.drain_s,
        autoscaling_config={"min_replicas": ray_config.min_replicas, "max_replicas": ray_config.max_replicas,
                            "initial_replicas": ray_config.replicas,
                            "target_ongoing_requests": ray_config.sessions_per_replica},
    ).bind(config, registry)
    # Every relayed socket is an ongoing request of the ingress for its whole life: room for all of
    # them at the largest scale, and for the pages beside them.
    ingress_room = ray_config.max_replicas * config.max_sessions + 64
    return VoiceIngress.options(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=ingress_room).bind(
        replica, registry, config.allowed_origins)


def run(config: ServerConfig, ray_config: RayServeConfig, address: str | None = None) -> None:
    """Start (or join) Ray, deploy, and serve until interrupted."""
    import time

    import ray

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    serve.start(http_options={"host": config.host, "port": ray_config.port})
    serve.run(build_app(config, ray_config), name="voicespec", route_prefix="/")
    print(f"serving on Ray: player http://{config.host}:{ray_config.port}/  WebSocket "
          f"ws://{config.host}:{ray_config.port}{P.WS_PATH}", flush=True)
    while True:
        time.sleep(3600)
