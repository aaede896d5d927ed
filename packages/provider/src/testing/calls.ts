import type { EC2Client } from "@aws-sdk/client-ec2";

/**
 * Counts the EC2 operations a client sends (each logical call once, before the SDK's retries),
 * by command name (`DescribeInstancesCommand`, ...). Test and benchmark helper.
 */
export function countCalls(client: EC2Client): Map<string, number> {
  const counts = new Map<string, number>();
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const name = context.commandName ?? "?";
      counts.set(name, (counts.get(name) ?? 0) + 1);
      return next(args);
    },
    { step: "initialize", name: "nebulaCallCounter" },
  );
  return counts;
}
