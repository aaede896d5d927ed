/**
 * The event channel's queue: long-polled receives and batched deletes on one SQS queue, parsed at
 * the boundary. {@link SqsDoorbellQueue} is the SDK implementation; the {@link Doorbells}
 * collaborator depends on the {@link DoorbellQueue} interface only.
 */
import {
  DeleteMessageBatchCommand,
  type Message,
  ReceiveMessageCommand,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import { type Doorbell, parseDoorbell } from "./doorbell-message.js";
import { toProviderError } from "./errors.js";

/** One received message: what it asks for, and what deleting it takes. */
export interface QueueMessage {
  /** SQS's message ID (for logs). */
  readonly id: string;
  /** What deleting it takes (`ReceiptHandle`). */
  readonly receipt: string;
  /** When SQS received it (ms since the epoch; `SentTimestamp`), when it said. */
  readonly sentAt: number | undefined;
  /** When this node's receive returned it (ms since the epoch), when known. */
  readonly receivedAt?: number;
  /** How many times it has been received, this time included (`ApproximateReceiveCount`). */
  readonly receiveCount: number;
  /** What it asks for. */
  readonly doorbell: Doorbell;
}

/** The queue as the {@link Doorbells} collaborator uses it. Each method throws a classified `ProviderError`. */
export interface DoorbellQueue {
  /** Up to 10 messages, waiting up to `waitSeconds` for the first (long poll). */
  receive(waitSeconds: number, signal: AbortSignal): Promise<readonly QueueMessage[]>;
  /** Deletes messages by receipt (up to 10 per call); a receipt SQS refuses is not an error. */
  delete(receipts: readonly string[]): Promise<void>;
}

/** The {@link DoorbellQueue} over the AWS SDK's SQS client. */
export class SqsDoorbellQueue implements DoorbellQueue {
  readonly #sqs: SQSClient;
  readonly #url: string;

  /**
   * @param sqs - the SQS client (Region, endpoint, retries).
   * @param queueUrl - the queue's URL.
   */
  constructor(sqs: SQSClient, queueUrl: string) {
    this.#sqs = sqs;
    this.#url = queueUrl;
  }

  async receive(waitSeconds: number, signal: AbortSignal): Promise<readonly QueueMessage[]> {
    let messages: Message[] | undefined;
    try {
      ({ Messages: messages } = await this.#sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: this.#url,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: waitSeconds,
          MessageSystemAttributeNames: ["SentTimestamp", "ApproximateReceiveCount"],
        }),
        { abortSignal: signal },
      ));
    } catch (error) {
      throw toProviderError(error, `ReceiveMessage from ${this.#url}`);
    }
    const receivedAt = Date.now();
    return (messages ?? []).flatMap((m) =>
      m.ReceiptHandle === undefined
        ? []
        : [
            {
              id: m.MessageId ?? "",
              receipt: m.ReceiptHandle,
              sentAt: numberOf(m.Attributes?.SentTimestamp),
              receivedAt,
              receiveCount: numberOf(m.Attributes?.ApproximateReceiveCount) ?? 1,
              doorbell: parseDoorbell(m.Body),
            },
          ],
    );
  }

  async delete(receipts: readonly string[]): Promise<void> {
    for (let i = 0; i < receipts.length; i += 10) {
      const entries = receipts.slice(i, i + 10).map((r, k) => ({ Id: `m${k}`, ReceiptHandle: r }));
      try {
        await this.#sqs.send(
          new DeleteMessageBatchCommand({ QueueUrl: this.#url, Entries: entries }),
        );
      } catch (error) {
        throw toProviderError(error, `DeleteMessageBatch on ${this.#url}`);
      }
    }
  }
}

function numberOf(text: string | undefined): number | undefined {
  if (text === undefined || !/^\d{1,16}$/.test(text)) return undefined;
  return Number(text);
}
