// SPDX-License-Identifier: Apache-2.0
// A typed use of the packed @ucall/client: tsc checks it against the package's declarations.
import { Client, RpcError } from "@ucall/client";

export async function three(url: string): Promise<number> {
  const client = new Client(url, { timeout: 5_000 });
  try {
    const sum: number = await client.call<number>("sum", { a: 1, b: 2 });
    return sum;
  } catch (error) {
    if (error instanceof RpcError) throw new Error(`${error.code}: ${error.message}`);
    throw error;
  } finally {
    client.close();
  }
}
