// Starts a whole set of peers (etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
// moto), prints its info as one JSON line, and waits to be killed.
// Used by interrupt.integration.test.ts: node --import ./ts-hooks.mjs hold-peers.ts
import { startTestPeers } from "../peers.js";

const peers = await startTestPeers({ controlPlane: { controllers: true, scheduler: true } });
process.stdout.write(`${JSON.stringify(peers.info())}\n`);
setInterval(() => {}, 60_000);
// Never outlive the test that started this: its end of the stdin pipe closes when it goes.
process.stdin.on("close", () => process.kill(process.pid, "SIGTERM"));
process.stdin.resume();
