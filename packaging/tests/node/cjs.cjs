// SPDX-License-Identifier: Apache-2.0
// The packed @ucall/client through require(): sum over HTTP.
const { Client } = require("@ucall/client");

(async () => {
  const client = new Client(`http://127.0.0.1:${process.argv[2]}/`);
  const sum = await client.call("sum", [1, 2]);
  client.close();
  if (sum !== 3) throw new Error(`sum answered ${sum}`);
  console.log("ok cjs");
})().catch((error) => {
  console.error(error);
  process.exit(1);
});
