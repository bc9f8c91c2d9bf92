#!/usr/bin/env node
// A Farm client that is not .NET: @grpc/grpc-js with Farm's .proto files loaded at run time.
// Against a running farm and an existing queue it sends a few messages (farm.v1.Messaging/Send),
// receives them in PEEK_LOCK mode (ReceiveBatch), completes them (Settle) and prints one JSON object.
//
//   node client.js <address> <queue> [count]      e.g. node client.js http://127.0.0.1:5480 orders 5
//
// Exit code 0 when every message sent came back once and was completed; 1 otherwise.
'use strict';

const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_ROOT = process.env.FARM_PROTO_ROOT || path.resolve(__dirname, '../../src/Contracts/Protos');
const DEADLINE_MS = 30000;

function usage(message) {
  process.stderr.write(`${message}\nusage: node client.js <address> <queue> [count]\n`);
  process.exit(2);
}

function loadMessaging() {
  // keepCase: false gives camelCase field names; the google/protobuf imports resolve to the
  // well-known types protobufjs ships.
  const definition = protoLoader.loadSync('farm/v1/messaging.proto', {
    includeDirs: [PROTO_ROOT],
    keepCase: false,
    longs: String,
    enums: String,
    bytes: Buffer,
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).farm.v1.Messaging;
}

function unary(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + DEADLINE_MS }, (error, response) => {
      if (error) {
        const reason = error.metadata && error.metadata.get('farm-error')[0];
        reject(new Error(`${method} failed: ${error.code} ${error.details}${reason ? ` (${reason})` : ''}`));
      } else {
        resolve(response);
      }
    });
  });
}

async function main() {
  const [address, queue, countText] = process.argv.slice(2);
  if (!address || !queue) usage('address and queue are required');
  const count = countText === undefined ? 5 : Number.parseInt(countText, 10);
  if (!(count > 0)) usage(`count must be a positive number, not ${countText}`);

  const target = address.replace(/^[a-z]+:\/\//i, '').replace(/\/+$/, '');
  const Messaging = loadMessaging();
  const client = new Messaging(target, grpc.credentials.createInsecure());

  const runId = `${process.pid}-${Date.now()}`;
  const messages = Array.from({ length: count }, (_, i) => ({
    messageId: `node-${runId}-${i}`,
    body: Buffer.from(JSON.stringify({ from: 'node', index: i })),
    contentType: 'application/json',
    subject: 'interop',
    applicationProperties: { index: { intValue: i }, client: { stringValue: 'grpc-js' } },
  }));

  const sent = await unary(client, 'Send', { entity: queue, messages });

  const received = [];
  const deadline = Date.now() + DEADLINE_MS;
  while (received.length < count && Date.now() < deadline) {
    const batch = await unary(client, 'ReceiveBatch', {
      entity: queue,
      mode: 'RECEIVE_MODE_PEEK_LOCK',
      maxMessages: count - received.length,
      maxWait: { seconds: 5, nanos: 0 },
    });
    received.push(...batch.messages);
  }

  const settled = received.length === 0 ? { results: [] } : await unary(client, 'Settle', {
    entity: queue,
    settlements: received.map((m) => ({ lockToken: m.lockToken, disposition: 'DISPOSITION_COMPLETE' })),
  });
  const settleErrors = settled.results.filter((r) => r.errorCode && r.errorCode !== 'FARM_ERROR_CODE_UNSPECIFIED');

  client.close();

  const sentIds = messages.map((m) => m.messageId);
  const receivedIds = received.map((m) => m.message.messageId);
  const result = {
    sent: sentIds,
    sequence_numbers: sent.sequenceNumbers,
    received: received.map((m) => ({
      message_id: m.message.messageId,
      sequence_number: m.sequenceNumber,
      delivery_count: m.deliveryCount,
      body: m.message.body.toString('utf8'),
      index: m.message.applicationProperties.index ? m.message.applicationProperties.index.intValue : null,
      locked: m.lockToken !== '',
    })),
    completed: received.length - settleErrors.length,
    settle_errors: settleErrors.map((r) => `${r.lockToken}: ${r.errorCode} ${r.errorMessage}`),
  };
  process.stdout.write(`${JSON.stringify(result)}\n`);

  const sameIds = receivedIds.length === sentIds.length && sentIds.every((id) => receivedIds.includes(id));
  process.exit(sameIds && settleErrors.length === 0 ? 0 : 1);
}

main().catch((error) => {
  process.stderr.write(`${error.message}\n`);
  process.exit(1);
});
