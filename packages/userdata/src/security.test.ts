import type { V1Pod } from "@kubernetes/client-node";
import { describe, expect, it } from "vitest";
import { HOST_NETWORK_ANNOTATION, renderUserData } from "./index.js";

const asPod = (value: unknown) => value as V1Pod;
const pod = (
  app: Record<string, unknown>,
  spec: Record<string, unknown> = {},
  annotations: Record<string, string> = {},
) =>
  asPod({
    metadata: { name: "p", namespace: "t", uid: "u", annotations },
    spec: { containers: [{ name: "app", image: "busybox:1", ...app }], ...spec },
  });
function script(value: V1Pod, options = {}): string {
  const result = renderUserData(value, options);
  if (!result.ok) throw result.error;
  return result.value.script;
}
const line = (text: string, name: string) =>
  new RegExp(`^${name}=(.*)$`, "m").exec(text)?.[1] ?? "<absent>";
function refusal(value: V1Pod) {
  const result = renderUserData(value);
  if (result.ok) throw new Error("expected a refusal");
  return { code: result.error.code, path: result.error.path, message: result.error.message };
}

describe("probes never make the host call the instance metadata service", () => {
  it.each([
    ["httpGet", { httpGet: { host: "169.254.169.254", path: "/latest/meta-data/", port: 80 } }],
    ["httpGet", { httpGet: { host: "instance-data.ec2.internal", path: "/", port: 80 } }],
    ["tcpSocket", { tcpSocket: { host: "fd00:ec2::254", port: 80 } }],
    ["tcpSocket", { tcpSocket: { host: "169.254.170.2", port: 80 } }],
  ])("refuses a %s probe aimed at %j", (kind, probe) => {
    expect(refusal(pod({ readinessProbe: probe }))).toMatchObject({
      code: "UnsupportedField",
      path: `spec.containers[app].readinessProbe.${kind}.host`,
    });
  });

  it("still runs probes with no host (the Pod) or another host", () => {
    const ok = renderUserData(
      pod({
        readinessProbe: { httpGet: { path: "/ready", port: 8080 } },
        livenessProbe: { tcpSocket: { host: "10.0.0.7", port: 5432 } },
      }),
    );
    expect(ok.ok).toBe(true);
  });
});

describe("the Pod's network", () => {
  it("is a namespace of its own by default, with every container port published", () => {
    const text = script(
      pod({
        ports: [
          { containerPort: 8080 },
          { containerPort: 53, hostPort: 5353, protocol: "UDP" },
          { containerPort: 9000, hostPort: 9001, hostIP: "10.0.0.5" },
        ],
      }),
    );
    expect(line(text, "HOST_NETWORK")).toBe("0");
    expect(line(text, "SANDBOX_IMAGE")).toBe("$'registry.k8s.io/pause:3.10'");
    expect(line(text, "SANDBOX_FLAGS")).toBe(
      "($'--hostname=p' $'--publish=8080:8080/tcp' $'--publish=5353:53/udp' $'--publish=10.0.0.5:9001:9000/tcp')",
    );
  });

  it("takes the sandbox image and command from the options", () => {
    const text = script(pod({}), {
      sandbox: { image: "ecr.example/pause:1", command: ["/p", "-x"] },
    });
    expect(line(text, "SANDBOX_IMAGE")).toBe("$'ecr.example/pause:1'");
    expect(line(text, "SANDBOX_CMD")).toBe("($'/p' $'-x')");
    expect(renderUserData(pod({}), { sandbox: { image: "--privileged" } }).ok).toBe(false);
  });

  it("refuses hostNetwork: true without the opt-in annotation, naming the field", () => {
    expect(refusal(pod({}, { hostNetwork: true }))).toMatchObject({
      code: "HostNetworkNotAllowed",
      path: "spec.hostNetwork",
    });
    expect(refusal(pod({}, { hostNetwork: true }, { [HOST_NETWORK_ANNOTATION]: "yes" })).code).toBe(
      "HostNetworkNotAllowed",
    );
    const text = script(pod({}, { hostNetwork: true }, { [HOST_NETWORK_ANNOTATION]: "true" }));
    expect(line(text, "HOST_NETWORK")).toBe("1");
    expect(line(text, "SANDBOX_FLAGS")).toBe("()");
    expect(line(script(pod({}, { hostNetwork: false })), "HOST_NETWORK")).toBe("0");
  });

  it("refuses host PID/IPC and a shared process namespace", () => {
    for (const field of ["hostPID", "hostIPC", "shareProcessNamespace"]) {
      expect(refusal(pod({}, { [field]: true }))).toMatchObject({
        code: "UnsupportedField",
        path: `spec.${field}`,
      });
    }
  });
});

describe("security settings: enforced as docker flags or refused", () => {
  const flags = (value: V1Pod) => line(script(value), "C0_FLAGS");

  it("seccomp: RuntimeDefault is docker's default profile, Unconfined is said so, Localhost refused", () => {
    expect(flags(pod({ securityContext: { seccompProfile: { type: "RuntimeDefault" } } }))).toBe(
      "()",
    );
    expect(flags(pod({ securityContext: { seccompProfile: { type: "Unconfined" } } }))).toBe(
      "($'--security-opt=seccomp=unconfined')",
    );
    expect(flags(pod({}, { securityContext: { seccompProfile: { type: "Unconfined" } } }))).toBe(
      "($'--security-opt=seccomp=unconfined')",
    );
    // The container's field wins over the Pod's.
    expect(
      flags(
        pod(
          { securityContext: { seccompProfile: { type: "RuntimeDefault" } } },
          { securityContext: { seccompProfile: { type: "Unconfined" } } },
        ),
      ),
    ).toBe("()");
    expect(
      refusal(
        pod({
          securityContext: { seccompProfile: { type: "Localhost", localhostProfile: "x.json" } },
        }),
      ),
    ).toMatchObject({
      code: "UnsupportedField",
      path: "spec.containers[app].securityContext.seccompProfile",
    });
    expect(
      refusal(pod({}, {}, { "seccomp.security.alpha.kubernetes.io/pod": "localhost/x.json" })),
    ).toMatchObject({
      code: "UnsupportedField",
      path: "metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]",
    });
    expect(
      flags(pod({}, {}, { "container.seccomp.security.alpha.kubernetes.io/app": "unconfined" })),
    ).toBe("($'--security-opt=seccomp=unconfined')");
  });

  it("AppArmor: RuntimeDefault kept, Unconfined said so, Localhost refused (field and annotation)", () => {
    expect(flags(pod({ securityContext: { appArmorProfile: { type: "RuntimeDefault" } } }))).toBe(
      "()",
    );
    expect(flags(pod({}, { securityContext: { appArmorProfile: { type: "Unconfined" } } }))).toBe(
      "($'--security-opt=apparmor=unconfined')",
    );
    expect(
      refusal(
        pod({ securityContext: { appArmorProfile: { type: "Localhost", localhostProfile: "p" } } }),
      ),
    ).toMatchObject({
      code: "UnsupportedField",
      path: "spec.containers[app].securityContext.appArmorProfile",
    });
    expect(
      refusal(pod({}, {}, { "container.apparmor.security.beta.kubernetes.io/app": "localhost/p" })),
    ).toMatchObject({
      code: "UnsupportedField",
      path: "metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]",
    });
    expect(
      flags(pod({}, {}, { "container.apparmor.security.beta.kubernetes.io/app": "unconfined" })),
    ).toBe("($'--security-opt=apparmor=unconfined')");
  });

  it("privilege escalation, read-only root, privileged and capabilities as given", () => {
    expect(
      flags(
        pod({
          securityContext: {
            allowPrivilegeEscalation: false,
            readOnlyRootFilesystem: true,
            privileged: true,
            capabilities: { add: ["net_admin"], drop: ["NET_RAW", "ALL"] },
          },
        }),
      ),
    ).toBe(
      "($'--privileged' $'--read-only' $'--security-opt=no-new-privileges' $'--cap-add=NET_ADMIN' $'--cap-drop=NET_RAW' $'--cap-drop=ALL')",
    );
    expect(flags(pod({}, { securityContext: { supplementalGroups: [5, 6] } }))).toBe(
      "($'--group-add=5' $'--group-add=6')",
    );
  });

  it("runAsNonRoot: checked at start against the image's user, or refused when runAsUser is 0", () => {
    expect(line(script(pod({ securityContext: { runAsNonRoot: true } })), "NONROOT")).toBe(
      "($'image')",
    );
    expect(
      line(script(pod({}, { securityContext: { runAsNonRoot: true, runAsUser: 0 } })), "NONROOT"),
    ).toBe("($'root')");
    expect(
      line(script(pod({ securityContext: { runAsNonRoot: true, runAsUser: 1000 } })), "NONROOT"),
    ).toBe("($'')");
    // The container's false wins over the Pod's true.
    expect(
      line(
        script(
          pod(
            { securityContext: { runAsNonRoot: false } },
            { securityContext: { runAsNonRoot: true } },
          ),
        ),
        "NONROOT",
      ),
    ).toBe("($'')");
  });

  it("refuses SELinux options, sysctls, fsGroup and an unmasked /proc, naming the field", () => {
    expect(refusal(pod({ securityContext: { seLinuxOptions: { level: "s0" } } })).path).toBe(
      "spec.containers[app].securityContext.seLinuxOptions",
    );
    expect(refusal(pod({ securityContext: { procMount: "Unmasked" } })).path).toBe(
      "spec.containers[app].securityContext.procMount",
    );
    for (const [field, value] of [
      ["seLinuxOptions", { level: "s0" }],
      ["sysctls", [{ name: "net.core.somaxconn", value: "1024" }]],
      ["fsGroup", 2000],
    ] as const) {
      expect(refusal(pod({}, { securityContext: { [field]: value } }))).toMatchObject({
        code: "UnsupportedField",
        path: `spec.securityContext.${field}`,
      });
    }
  });
});
