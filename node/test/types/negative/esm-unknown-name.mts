// expect: TS2724 TS2305 -- a name the package does not export
import { wirte } from 'outbox';
export { wirte };
