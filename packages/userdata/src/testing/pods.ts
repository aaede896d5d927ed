import type { V1Pod } from "@kubernetes/client-node";

/** A typical two-container Pod (app + sidecar), as the tests and the benchmark use it. */
export function typicalPod(overrides: Partial<V1Pod["spec"]> = {}): V1Pod {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: "web-7d4b9c",
      namespace: "shop",
      uid: "8f3a84043d69c3dd",
      labels: { app: "web" },
    },
    spec: {
      restartPolicy: "Always",
      terminationGracePeriodSeconds: 30,
      containers: [
        {
          name: "app",
          image: "registry.example.com/shop/web:1.4.2",
          command: ["/usr/bin/web"],
          args: ["--port=8080", "--log-level=info"],
          env: [
            { name: "MODE", value: "production" },
            { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
            { name: "HOST_IP", valueFrom: { fieldRef: { fieldPath: "status.hostIP" } } },
          ],
          resources: { limits: { memory: "2Gi", cpu: "1500m" } },
          ports: [{ containerPort: 8080 }],
          terminationMessagePolicy: "FallbackToLogsOnError",
        },
        {
          name: "sidecar",
          image: "registry.example.com/shop/log-shipper:3.1",
          env: [{ name: "TARGET", value: "https://logs.example.com/ingest" }],
          resources: { limits: { memory: "128Mi", cpu: "100m" } },
        },
      ],
      ...overrides,
    },
  };
}
