// Run from the repository after `npm run build`: node packages/userdata/examples/render.mjs
import { renderUserData } from "@nebula/userdata";

const pod = {
  metadata: { name: "web", namespace: "shop", uid: "2f1c6f0e-5b7a-4c8e-9a51-0d6f3c2b9e11" },
  spec: {
    restartPolicy: "OnFailure",
    containers: [
      {
        name: "app",
        image: "public.ecr.aws/docker/library/busybox:1.36",
        command: ["sh", "-c", "echo hello; exit 0"],
      },
    ],
  },
};

// The Pod's spec goes to SSM parameters only its instance may read; the user-data is a bootstrap.
const result = renderUserData(pod, { cluster: "prod", delivery: "parameters" });
if (!result.ok) {
  console.error(`${result.error.code} at ${result.error.path}: ${result.error.message}`);
  process.exit(1);
}
const { bytes, gzipped, userData, parameters, sharedParameters } = result.value;
console.log(
  `user-data: ${bytes} bytes${gzipped ? " (gzipped)" : ""}, ${userData.length} characters of base64; parameters: ${parameters.length} of the Pod, ${sharedParameters.length} of the supervisor`,
);
// Write the parameters (SecureString; @nebula/provider does), then pass `userData` as
// RunInstances' UserData and tag the Pod's parameters with the instance's ARN.
