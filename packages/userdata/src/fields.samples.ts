/**
 * One sample value per Pod field, for docs/pod-fields.md's test (fields.test.ts): the value set
 * at the field's path on a plain Pod, rendered, shows what Nebula does with that field.
 */
const bytes64 = (text: string) => Buffer.from(text).toString("base64");

/** `spec.<field>` */
export const POD_SAMPLES: Record<string, unknown> = {
  activeDeadlineSeconds: 60,
  affinity: {
    nodeAffinity: {
      requiredDuringSchedulingIgnoredDuringExecution: {
        nodeSelectorTerms: [{ matchExpressions: [{ key: "zone", operator: "In", values: ["a"] }] }],
      },
    },
  },
  automountServiceAccountToken: false,
  containers: [
    { name: "app", image: "busybox:1" },
    { name: "side", image: "busybox:1" },
  ],
  dnsConfig: { nameservers: ["10.0.0.10"], searches: ["svc.cluster.local"] },
  dnsPolicy: "Default",
  enableServiceLinks: false,
  ephemeralContainers: [{ name: "debug", image: "busybox:1" }],
  hostAliases: [{ ip: "10.0.0.1", hostnames: ["db"] }],
  hostIPC: true,
  hostNetwork: true,
  hostPID: true,
  hostUsers: false,
  hostname: "web-0",
  hostnameOverride: "web-0.example",
  imagePullSecrets: [{ name: "regcred" }],
  initContainers: [{ name: "init", image: "busybox:1", command: ["true"] }],
  nodeName: "nebula-b",
  nodeSelector: { disktype: "ssd" },
  os: { name: "windows" },
  overhead: { cpu: "250m" },
  preemptionPolicy: "Never",
  priority: 1000,
  priorityClassName: "high",
  readinessGates: [{ conditionType: "example.com/ready" }],
  resourceClaims: [{ name: "gpu", resourceClaimName: "gpu-claim" }],
  resources: { limits: { cpu: "1", memory: "1Gi" } },
  restartPolicy: "Always",
  runtimeClassName: "gvisor",
  schedulerName: "my-scheduler",
  schedulingGates: [{ name: "example.com/gate" }],
  schedulingGroup: { podGroupName: "group" },
  securityContext: { runAsUser: 1000 },
  serviceAccount: "builder",
  serviceAccountName: "builder",
  setHostnameAsFQDN: true,
  shareProcessNamespace: true,
  subdomain: "web",
  terminationGracePeriodSeconds: 90,
  tolerations: [{ key: "k", operator: "Exists" }],
  topologySpreadConstraints: [
    { maxSkew: 1, topologyKey: "kubernetes.io/hostname", whenUnsatisfiable: "DoNotSchedule" },
  ],
  volumes: [{ name: "scratch", emptyDir: {} }],
};

/**
 * Pod fields that act only beside another: the sample Pod of the row gets these too, and so does
 * the Pod it is compared with (`setHostnameAsFQDN` means nothing without a `subdomain`).
 */
export const POD_SAMPLE_COMPANIONS: Record<string, Record<string, unknown>> = {
  setHostnameAsFQDN: { subdomain: "web" },
};

/** `spec.securityContext.<field>` */
export const POD_SECURITY_SAMPLES: Record<string, unknown> = {
  appArmorProfile: { type: "Localhost", localhostProfile: "custom" },
  fsGroup: 2000,
  fsGroupChangePolicy: "OnRootMismatch",
  runAsGroup: 3000,
  runAsNonRoot: true,
  runAsUser: 1000,
  seLinuxChangePolicy: "MountOption",
  seLinuxOptions: { level: "s0:c123,c456" },
  seccompProfile: { type: "Localhost", localhostProfile: "profiles/audit.json" },
  supplementalGroups: [4000],
  supplementalGroupsPolicy: "Strict",
  sysctls: [{ name: "net.core.somaxconn", value: "1024" }],
  windowsOptions: { runAsUserName: "ContainerUser" },
};

/** `spec.containers[].<field>` */
export const CONTAINER_SAMPLES: Record<string, unknown> = {
  args: ["--port", "80"],
  command: ["/bin/server"],
  env: [{ name: "MODE", value: "fast" }],
  envFrom: [{ configMapRef: { name: "settings" } }],
  image: "busybox:2",
  imagePullPolicy: "Always",
  lifecycle: { preStop: { exec: { command: ["sh", "-c", "sleep 1"] } } },
  livenessProbe: { exec: { command: ["true"] } },
  name: "web",
  ports: [{ containerPort: 8080 }],
  readinessProbe: { tcpSocket: { port: 8080 } },
  resizePolicy: [{ resourceName: "cpu", restartPolicy: "NotRequired" }],
  resources: { limits: { memory: "256Mi" } },
  restartPolicy: "Never",
  restartPolicyRules: [{ action: "Restart", exitCodes: { operator: "In", values: [42] } }],
  securityContext: { readOnlyRootFilesystem: true },
  startupProbe: { httpGet: { path: "/healthz", port: 8080 } },
  stdin: true,
  stdinOnce: true,
  terminationMessagePath: "/tmp/message",
  terminationMessagePolicy: "FallbackToLogsOnError",
  tty: true,
  volumeDevices: [{ name: "block", devicePath: "/dev/xvdf" }],
  volumeMounts: [{ name: "scratch", mountPath: "/scratch" }],
  workingDir: "/srv",
};

/** `spec.containers[].securityContext.<field>` */
export const CONTAINER_SECURITY_SAMPLES: Record<string, unknown> = {
  allowPrivilegeEscalation: false,
  appArmorProfile: { type: "Localhost", localhostProfile: "custom" },
  capabilities: { drop: ["ALL"], add: ["NET_BIND_SERVICE"] },
  privileged: true,
  procMount: "Unmasked",
  readOnlyRootFilesystem: true,
  runAsGroup: 3000,
  runAsNonRoot: true,
  runAsUser: 1000,
  seLinuxOptions: { level: "s0:c123,c456" },
  seccompProfile: { type: "Localhost", localhostProfile: "profiles/audit.json" },
  windowsOptions: { runAsUserName: "ContainerUser" },
};

/** `spec.volumes[].<kind>` (the volume named `scratch`, mounted at /scratch) */
export const VOLUME_SAMPLES: Record<string, unknown> = {
  awsElasticBlockStore: { volumeID: "vol-0123" },
  azureDisk: { diskName: "d", diskURI: "https://x/d" },
  azureFile: { secretName: "s", shareName: "share" },
  cephfs: { monitors: ["10.0.0.1:6789"] },
  cinder: { volumeID: "v" },
  configMap: { name: "settings" },
  csi: { driver: "ebs.csi.aws.com" },
  downwardAPI: { items: [{ path: "labels", fieldRef: { fieldPath: "metadata.labels" } }] },
  emptyDir: { medium: "Memory" },
  ephemeral: {
    volumeClaimTemplate: {
      spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } },
    },
  },
  fc: { targetWWNs: ["500a0982991b8dc5"], lun: 0 },
  flexVolume: { driver: "example/lvm" },
  flocker: { datasetName: "d" },
  gcePersistentDisk: { pdName: "d" },
  gitRepo: { repository: "https://example.com/r.git" },
  glusterfs: { endpoints: "e", path: "p" },
  hostPath: { path: "/var/log" },
  image: { reference: "busybox:1" },
  iscsi: { targetPortal: "10.0.0.1:3260", iqn: "iqn.2001-04.com.example:storage", lun: 0 },
  nfs: { server: "10.0.0.2", path: "/exports" },
  persistentVolumeClaim: { claimName: "data" },
  photonPersistentDisk: { pdID: "p" },
  portworxVolume: { volumeID: "v" },
  projected: { sources: [{ configMap: { name: "settings" } }] },
  quobyte: { registry: "r", volume: "v" },
  rbd: { monitors: ["10.0.0.1:6789"], image: "i" },
  scaleIO: { gateway: "g", system: "s", secretRef: { name: "s" } },
  secret: { secretName: "token" },
  storageos: { volumeName: "v" },
  vsphereVolume: { volumePath: "[ds] v.vmdk" },
};

/**
 * The ConfigMaps and Secrets the samples name, and the Services of the plain Pod's namespace, as
 * the vnode would hand them to the render.
 */
export const SAMPLE_SOURCES = {
  services: [
    {
      metadata: { name: "kubernetes", namespace: "default" },
      spec: { clusterIP: "10.96.0.1", ports: [{ name: "https", port: 443, protocol: "TCP" }] },
    },
    {
      metadata: { name: "db", namespace: "team-a" },
      spec: { clusterIP: "10.96.0.20", ports: [{ port: 5432, protocol: "TCP" }] },
    },
  ],
  configMaps: { settings: { data: { mode: "fast" } } },
  secrets: {
    token: { data: { token: bytes64("s3cret") } },
    regcred: {
      data: {
        ".dockerconfigjson": bytes64(
          JSON.stringify({ auths: { "registry.example": { auth: bytes64("u:p") } } }),
        ),
      },
    },
  },
};
