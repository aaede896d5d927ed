{{/*
One virtual node's objects: ServiceAccount, RBAC and admission policies pinned to its Node and
Leases, its ConfigMap and its Deployment (leader election between its replicas). Called once for
vnode.nodeName, or once per entry of vnode.nodes. The dict:
  root      the chart's root context
  name      the objects' name (<release>-vnode, or <release>-vnode-<node> for an entry)
  node      the Node's name (--node-name, the nebula:node tag of its instances)
  replicas  the Deployment's replicas
  config    config.json (for an entry: vnode.config with the entry's overrides)
  pool      true for an entry of vnode.nodes: its objects and Pods also carry nebula.dev/node
*/}}
{{- define "nebula.vnode" -}}
{{- $root := .root }}
{{- $name := .name }}
{{- $node := .node }}
{{- $config := .config }}
{{- $ctx := dict "root" $root "component" "vnode" "values" $root.Values.vnode }}
{{- if .pool }}{{- $_ := set $ctx "node" $node }}{{- end }}
{{- $provider := $config.provider }}
{{- $proxyAccount := splitList "/" (dig "serviceProxy" "serviceAccount" "nebula-system/nebula-service-proxy" $provider) }}
{{- $_ := required "vnode.config.provider.clusterName is required: the nebula:cluster tag of every instance (one name per cluster)" $provider.clusterName }}
{{- $_ := required "vnode.config.provider.region is required: the AWS region the instances run in" $provider.region }}
{{- $_ := required "vnode.config.provider.subnetIds is required: one or more subnets the instances launch into" $provider.subnetIds }}
{{- $_ := required "vnode.config.provider.securityGroupIds is required: the security groups of the instances" $provider.securityGroupIds }}
{{- $_ := required "vnode.config.provider.imageId is required: the AMI of the hosts" $provider.imageId }}
{{- $_ := required "vnode.config.provider.instanceProfile is required: the instance profile of the hosts (deploy/vnode/iam)" $provider.instanceProfile }}
# nebula-vnode: the virtual node. Least privilege: every RBAC rule names what uses it
# (the same rules as `kubectl kustomize deploy/` renders from deploy/vnode/rbac.yaml; a test keeps
# them equal). The rules that can name their object are pinned to the Node {{ $node }} and its
# Leases; the ValidatingAdmissionPolicies below fence what RBAC cannot name.
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
  {{- with $root.Values.vnode.serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $name }}
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
rules:
  # Register the virtual Node on first start (the admission policies: only its own name).
  - apiGroups: [""]
    resources: ["nodes"]
    verbs: ["create"]
  # Read it and bring its labels and taint up to date.
  - apiGroups: [""]
    resources: ["nodes"]
    verbs: ["get", "patch"]
    resourceNames: [{{ $node | quote }}]
  # Node conditions, capacity, addresses, heartbeat.
  - apiGroups: [""]
    resources: ["nodes/status"]
    verbs: ["patch"]
    resourceNames: [{{ $node | quote }}]
  # The Pod informer (spec.nodeName=<node>), the finalizer and the teardown record (patch), the
  # kubelet-style final delete with grace 0 and a UID precondition (delete). RBAC cannot narrow
  # these to the Pods bound to its Node: the admission policies do, for every write.
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "watch", "patch", "delete"]
  # Truthful Pod status (the admission policies: Pods bound to its Node only).
  - apiGroups: [""]
    resources: ["pods/status"]
    verbs: ["patch"]
  # Launched, exited, back-off, restart limit, stopping/terminated, leak collected, launch failed.
  - apiGroups: ["events.k8s.io"]
    resources: ["events"]
    verbs: ["create", "patch"]
  {{- if eq (dig "capacity" "onRebalance" "report" $provider) "evict" }}
  # Only with provider.capacity.onRebalance: evict (deploy/vnode/rbac-rebalance-eviction.yaml):
  # the Pod of a Spot instance EC2 recommends moving off is evicted, within its
  # PodDisruptionBudgets. An eviction names no node: neither RBAC nor the admission policies can
  # hold it to this Node's Pods (docs/security.md).
  - apiGroups: [""]
    resources: ["pods/eviction"]
    verbs: ["create"]
  {{- end }}
  {{- if ne ($provider.podDelivery | default "parameters") "user-data" }}
  # ConfigMaps and Secrets a Pod on this node references, read by name (get only: no list or
  # watch, nothing cached) at launch, for the podDelivery "parameters" of the provider (the
  # default; with "user-data" the vnode never reads them and the chart leaves this rule out).
  - apiGroups: [""]
    resources: ["configmaps", "secrets"]
    verbs: ["get"]
  # The Services of a Pod's environment (<SVC>_SERVICE_HOST... as the kubelet sets them): the
  # Pod's namespace's and default/kubernetes, listed at launch.
  - apiGroups: [""]
    resources: ["services"]
    verbs: ["list"]
  # Bound service-account tokens of the Pods on this node (projected serviceAccountToken volumes,
  # kube-api-access-* among them), requested at launch and renewed while they run. The admission
  # policy below refuses a token not bound to a Pod.
  - apiGroups: [""]
    resources: ["serviceaccounts/token"]
    verbs: ["create"]
  # The ServiceAccount of a Pod on this node, read by name at launch for its AWS role
  # (eks.amazonaws.com/role-arn, as EKS's IRSA webhook reads it).
  - apiGroups: [""]
    resources: ["serviceaccounts"]
    verbs: ["get"]
  {{- end }}
  # The kubelet API (kubectl logs, /stats/summary, /metrics/resource): a bearer token is
  # authenticated with a TokenReview and every request is authorized with a SubjectAccessReview,
  # as the kubelet does (what system:auth-delegator grants, and no more).
  - apiGroups: ["authentication.k8s.io"]
    resources: ["tokenreviews"]
    verbs: ["create"]
  - apiGroups: ["authorization.k8s.io"]
    resources: ["subjectaccessreviews"]
    verbs: ["create"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
---
# The kubelet API verifies the API server's client certificate against the client CA that
# kube-apiserver publishes in kube-system/extension-apiserver-authentication (the bootstrap Role
# extension-apiserver-authentication-reader: get, list, watch of that one ConfigMap).
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}-authentication-reader
  namespace: kube-system
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: extension-apiserver-authentication-reader
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
---
# The Node's heartbeat Lease lives in kube-node-lease (named as the Node).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}-node-lease
  namespace: kube-node-lease
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
rules:
  # The admission policies: only the Lease named as its Node.
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "update"]
    resourceNames: [{{ $node | quote }}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}-node-lease
  namespace: kube-node-lease
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}-node-lease
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
---
# The release's namespace: leader election between the replicas (Lease nebula-vnode-<node>), and
# the Pod ledger (one ConfigMap per Pod UID: the launch and the teardown record, out of the
# tenants' reach; named by UID, so no resourceNames).
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
rules:
  # The admission policies: only nebula-vnode-<node>.
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["create"]
  - apiGroups: ["coordination.k8s.io"]
    resources: ["leases"]
    verbs: ["get", "update"]
    resourceNames: [{{ printf "nebula-vnode-%s" $node | quote }}]
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["get", "list", "create", "patch", "delete"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $name }}
subjects:
  - kind: ServiceAccount
    name: {{ $name }}
    namespace: {{ $root.Release.Namespace }}
---
# The admission fence (deploy/vnode/admission.yaml, the same policies): what the vnode's
# ServiceAccount may write, object by object, where RBAC cannot say it. Pods: only those bound to
# its Node, never their spec, labels or owners, only nebula.dev/ finalizers and annotations, status
# and delete. Nodes: only {{ $node }}. Leases: only its Node's and its leader-election Lease.
# Reads never reach admission (docs/security.md). Needs Kubernetes 1.30+.
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $name }}-pods
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
spec:
  # An expression that cannot be evaluated refuses the request.
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        resources: ["pods", "pods/status"]
  # Only the virtual node's own requests: everyone else is left to RBAC.
  matchConditions:
    - name: nebula-vnode
      expression: "request.userInfo.username == 'system:serviceaccount:{{ $root.Release.Namespace }}:{{ $name }}'"
  variables:
    - name: node
      expression: {{ $node | squote | quote }}
  validations:
    - expression: >-
        request.operation != 'CREATE' &&
        has(oldObject.spec.nodeName) && oldObject.spec.nodeName == variables.node &&
        (request.operation == 'DELETE' ||
        (has(object.spec.nodeName) && object.spec.nodeName == variables.node))
      message: {{ $name }} may update or delete only the Pods bound to its own Node
      reason: Forbidden
    - expression: "request.operation != 'UPDATE' || object.spec == oldObject.spec"
      message: {{ $name }} may not change a Pod's spec
      reason: Forbidden
    - expression: >-
        request.operation != 'UPDATE' ||
        (has(object.metadata.labels) == has(oldObject.metadata.labels) &&
        (!has(object.metadata.labels) || object.metadata.labels == oldObject.metadata.labels) &&
        has(object.metadata.ownerReferences) == has(oldObject.metadata.ownerReferences) &&
        (!has(object.metadata.ownerReferences) ||
        object.metadata.ownerReferences == oldObject.metadata.ownerReferences))
      message: {{ $name }} may not change a Pod's labels or owners
      reason: Forbidden
    - expression: >-
        request.operation != 'UPDATE' ||
        ((!has(object.metadata.annotations) || object.metadata.annotations.all(k,
        k.startsWith('nebula.dev/') || (has(oldObject.metadata.annotations) &&
        k in oldObject.metadata.annotations &&
        oldObject.metadata.annotations[k] == object.metadata.annotations[k]))) &&
        (!has(oldObject.metadata.annotations) || oldObject.metadata.annotations.all(k,
        k.startsWith('nebula.dev/') ||
        (has(object.metadata.annotations) && k in object.metadata.annotations))))
      message: {{ $name }} may change only a Pod's nebula.dev/ annotations
      reason: Forbidden
    - expression: >-
        request.operation != 'UPDATE' ||
        ((!has(object.metadata.finalizers) || object.metadata.finalizers.all(f,
        f.startsWith('nebula.dev/') ||
        (has(oldObject.metadata.finalizers) && f in oldObject.metadata.finalizers))) &&
        (!has(oldObject.metadata.finalizers) || oldObject.metadata.finalizers.all(f,
        f.startsWith('nebula.dev/') ||
        (has(object.metadata.finalizers) && f in object.metadata.finalizers))))
      message: {{ $name }} may add or remove only nebula.dev/ finalizers
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $name }}-pods
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
spec:
  policyName: {{ $name }}-pods
  validationActions: [Deny]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $name }}-node
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        resources: ["nodes", "nodes/status"]
      - apiGroups: ["coordination.k8s.io"]
        apiVersions: ["v1"]
        operations: ["CREATE", "UPDATE", "DELETE"]
        resources: ["leases"]
  # Only the virtual node's own requests: everyone else is left to RBAC.
  matchConditions:
    - name: nebula-vnode
      expression: "request.userInfo.username == 'system:serviceaccount:{{ $root.Release.Namespace }}:{{ $name }}'"
  variables:
    - name: node
      expression: {{ $node | squote | quote }}
    # The leader-election Lease's namespace (--leader-election-namespace).
    - name: leaderNamespace
      expression: {{ $root.Release.Namespace | squote | quote }}
    # The object's name (DELETE has only oldObject).
    - name: name
      expression: "request.operation == 'DELETE' ? oldObject.metadata.name : object.metadata.name"
  validations:
    - expression: "request.resource.resource != 'nodes' || variables.name == variables.node"
      message: {{ $name }} may write only its own Node
      reason: Forbidden
    - expression: >-
        request.resource.resource != 'leases' ||
        (request.namespace == 'kube-node-lease' && variables.name == variables.node) ||
        (request.namespace == variables.leaderNamespace && variables.name == 'nebula-vnode-' + variables.node)
      message: {{ $name }} may write only its Node's Lease and its leader-election Lease
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $name }}-node
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
spec:
  policyName: {{ $name }}-node
  validationActions: [Deny]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $name }}-tokens
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["v1"]
        operations: ["CREATE"]
        resources: ["serviceaccounts/token"]
  # Only the virtual node's own requests: everyone else is left to RBAC.
  matchConditions:
    - name: nebula-vnode
      expression: "request.userInfo.username == 'system:serviceaccount:{{ $root.Release.Namespace }}:{{ $name }}'"
  validations:
    # The API server checks that the bound Pod exists with that UID; whether it is bound to this
    # Node is beyond an admission policy (docs/security.md). The one exception: the hosts' service
    # proxy (provider.serviceProxy.serviceAccount: deploy/vnode/service-proxy.yaml creates the
    # default one), whose token is bound to a Node.
    - expression: >-
        has(object.spec.boundObjectRef) && has(object.spec.boundObjectRef.uid) &&
        object.spec.boundObjectRef.uid != '' &&
        (object.spec.boundObjectRef.kind == 'Pod' ||
        (object.spec.boundObjectRef.kind == 'Node' && request.namespace == '{{ $proxyAccount | first }}' &&
        request.name == '{{ $proxyAccount | last }}'))
      message: {{ $name }} may request only service-account tokens bound to a Pod (or the service proxy's, bound to a Node)
      reason: Forbidden
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $name }}-tokens
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
spec:
  policyName: {{ $name }}-tokens
  validationActions: [Deny]
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
data:
  # The configuration reference is deploy/vnode/README.md.
  config.json: |
    {{- $config | toPrettyJson | nindent 4 }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "nebula.labels" $ctx | nindent 4 }}
spec:
  replicas: {{ .replicas }}
  selector:
    matchLabels:
      {{- include "nebula.selectorLabels" $ctx | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "nebula.labels" $ctx | nindent 8 }}
        {{- with $root.Values.vnode.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        # A new configuration rolls the Pods.
        nebula.dev/config-sha256: {{ $config | toJson | sha256sum }}
        {{- with $root.Values.vnode.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ $name }}
      {{- include "nebula.placement" $ctx | nindent 6 }}
      {{- with $root.Values.vnode.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.vnode.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      # Longer than a leader's release: SIGTERM → stop leading → drain → exit.
      terminationGracePeriodSeconds: 30
      {{- include "nebula.podSecurity" $root | nindent 6 }}
      containers:
        - name: vnode
          image: {{ include "nebula.image" (dict "root" $root "image" $root.Values.vnode.image) }}
          imagePullPolicy: {{ $root.Values.vnode.image.pullPolicy }}
          args:
            - --node-name={{ $node }}
            - --config=/etc/nebula/config.json
            - --namespace={{ $root.Release.Namespace }}
            # Always: even one replica overlaps its successor during a rolling update.
            - --leader-elect
            - --leader-election-namespace={{ $root.Release.Namespace }}
            - --metrics-bind-address=:{{ $root.Values.metricsPort }}
            - --health-probe-bind-address=:{{ $root.Values.probePort }}
            - --log-level={{ $root.Values.vnode.logLevel }}
          env:
            - name: POD_NAME
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            # The Node's InternalIP: where kube-apiserver reaches the kubelet API (kubectl logs).
            - name: POD_IP
              valueFrom:
                fieldRef:
                  fieldPath: status.podIP
            {{- with $root.Values.vnode.env }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: metrics
              containerPort: {{ $root.Values.metricsPort }}
            - name: probes
              containerPort: {{ $root.Values.probePort }}
            - name: kubelet
              containerPort: {{ ($config.node | default dict).kubeletPort | default 10250 }}
          livenessProbe:
            httpGet:
              path: /healthz
              port: probes
            initialDelaySeconds: 5
            periodSeconds: 10
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: probes
            periodSeconds: 5
            failureThreshold: 3
          resources:
            {{- toYaml $root.Values.vnode.resources | nindent 12 }}
          {{- include "nebula.containerSecurity" $root | nindent 10 }}
          volumeMounts:
            - name: config
              mountPath: /etc/nebula
              readOnly: true
            {{- with $root.Values.vnode.extraVolumeMounts }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
      volumes:
        - name: config
          configMap:
            name: {{ $name }}
        {{- with $root.Values.vnode.extraVolumes }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
{{ include "nebula.serving" (merge (dict "name" $name) $ctx) }}
{{- end -}}
