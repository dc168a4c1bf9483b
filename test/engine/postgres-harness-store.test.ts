/**
 * The HarnessStore contract on PostgreSQL (the test bed's database), the same suite SQLite passes
 * in the unit tier (proxy/store/sqlite-harness-store.test.ts).
 */
import { describeHarnessStoreContract } from "../support/store/harness-store-contract.ts";
import { postgresBackend } from "../support/store/store-backends.ts";

describeHarnessStoreContract(postgresBackend);
